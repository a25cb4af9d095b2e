/**
 * A response's rate-limit headers, read as the Python client reads them
 * (ratelimit/_headers): the IETF `RateLimit` / `RateLimit-Policy` fields in both forms,
 * `X-RateLimit-*`, OpenAI's and Anthropic's, and `Retry-After` (seconds or an
 * HTTP-date); then what they ask of a limiter (ratelimit/_limiting/feedback.py).
 * Garbage never throws: a malformed or over-long value is ignored, a wait is never
 * negative nor longer than the cap.
 */

export interface RateLimitInfo {
  limit?: number;
  remaining?: number;
  resetAfter?: number;
  retryAfter?: number;
  window?: number;
  /** The budget comes back evenly over `resetAfter` (OpenAI's, Anthropic's). */
  gradual?: boolean;
  /** The reset is when more comes back, at `limit` per `window` (the IETF list's `t`). */
  refills?: boolean;
  /** OpenAI's and Anthropic's token budget, apart from the requests. */
  tokens?: RateLimitInfo;
}

/** What `headers` may be: a plain object, a `Map`, fetch's `Headers`, or pairs. */
export type HeaderSource =
  | Record<string, string | number | string[] | undefined>
  | Map<string, string>
  | Iterable<[string, string]>
  | { forEach(cb: (value: string, name: string) => void): void };

/** The longest wait any header may impose, seconds. */
export const DEFAULT_CAP = 3600;

const MAX_HEADERS = 1024;
const MAX_NAME = 64;
const MAX_VALUE = 1024;
const MAX_REPEATS = 16;
const MAX_ITEMS = 16;
const MAX_NUMBER = 32;
const MAX_DATE = 40;

class Fields {
  constructor(
    readonly byName: Map<string, string[]>,
    readonly now: number,
    readonly cap: number,
  ) {}

  texts(name: string): string[] {
    return this.byName.get(name) ?? [];
  }

  values(...names: string[]): string[] {
    const found: string[] = [];
    for (const name of names) {
      for (const value of this.texts(name)) {
        for (const piece of pieces(value, ",")) if (piece.trim()) found.push(piece);
      }
    }
    return found;
  }

  least(...names: string[]): number | undefined {
    const numbers = this.values(...names)
      .map(number)
      .filter((n): n is number => n !== undefined);
    return numbers.length ? Math.min(...numbers) : undefined;
  }

  wait(seconds: number | undefined): number | undefined {
    if (seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return undefined;
    return Math.min(seconds, this.cap);
  }

  numericReset(value: number | undefined): number | undefined {
    return value === undefined ? undefined : this.wait(fromNow(value, this.now));
  }

  reset(...names: string[]): number | undefined {
    const delays: number[] = [];
    for (const name of names) {
      for (const text of this.texts(name)) {
        const moment = httpDate(text, this.now);
        if (moment !== undefined) {
          delays.push(moment - this.now);
          continue;
        }
        for (const piece of pieces(text, ",")) {
          const value = number(piece);
          if (value !== undefined) delays.push(fromNow(value, this.now));
          else {
            const at = rfc3339(piece);
            if (at !== undefined) delays.push(at - this.now);
          }
        }
      }
    }
    return delays.length ? this.wait(Math.max(...delays)) : undefined;
  }

  bucket(limit: number | undefined, remaining: number | undefined, seconds: number | undefined): RateLimitInfo {
    const reset = this.wait(seconds);
    const gradual = reset !== undefined && seconds !== undefined && seconds <= this.cap;
    return clean({ limit, remaining, resetAfter: reset, gradual });
  }
}

function clean(info: RateLimitInfo): RateLimitInfo {
  const out: RateLimitInfo = {};
  for (const [k, v] of Object.entries(info)) {
    if (v !== undefined && v !== false) (out as Record<string, unknown>)[k] = v;
  }
  return out;
}

function isEmpty(info: RateLimitInfo): boolean {
  return Object.keys(clean(info)).length === 0;
}

function pieces(text: string, separator: string, most = MAX_ITEMS): string[] {
  return text.split(separator).slice(0, most);
}

/** A finite, non-negative decimal. */
export function number(text: string): number | undefined {
  const t = text.trim();
  if (t.length > MAX_NUMBER || !/^\+?[0-9]+(\.[0-9]+)?$/.test(t)) return undefined;
  const value = Number(t);
  return Number.isFinite(value) ? value : undefined;
}

/** A numeric reset as seconds from now: epoch milliseconds above 1e12, epoch seconds
 * above 1e9, else a delay. */
function fromNow(value: number, now: number): number {
  if (value > 1e12) return value / 1000 - now;
  if (value > 1e9) return value - now;
  return value;
}

const UNITS: Record<string, number> = { h: 3600, m: 60, s: 1, ms: 0.001 };

/** `6m0s`, `1h2m3.5s`, `20ms`, or a bare number of seconds (Go's durations). */
export function duration(text: string): number | undefined {
  const t = text.trim();
  if (t.length > 32 || !t) return undefined;
  const plain = number(t);
  if (plain !== undefined) return plain;
  let total = 0;
  let i = 0;
  while (i < t.length) {
    const start = i;
    while (i < t.length && t[i]! >= "0" && t[i]! <= "9") i++;
    if (i === start) return undefined;
    if (t[i] === ".") {
      i++;
      const fraction = i;
      while (i < t.length && t[i]! >= "0" && t[i]! <= "9") i++;
      if (i === fraction) return undefined;
    }
    const amount = Number(t.slice(start, i));
    const unit = t.startsWith("ms", i) ? "ms" : t.slice(i, i + 1);
    if (!(unit in UNITS)) return undefined;
    i += unit.length;
    total += amount * UNITS[unit]!;
  }
  return total;
}

const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];

/** An HTTP-date (IMF-fixdate, RFC 850, asctime) as epoch seconds. */
export function httpDate(text: string, now: number): number | undefined {
  const t = text.trim();
  if (t.length > MAX_DATE) return undefined;
  let m: RegExpMatchArray | null;
  let day: string, month: string, year: string, hh: string, mm: string, ss: string;
  if ((m = t.match(/^[A-Za-z]{3}, (\d{2}) ([A-Za-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) GMT$/))) {
    [, day, month, year, hh, mm, ss] = m as unknown as string[] as [string, string, string, string, string, string, string];
  } else if ((m = t.match(/^[A-Za-z]+, (\d{2})-([A-Za-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) GMT$/))) {
    const [, d, mo, short, h, mi, s] = m as unknown as [string, string, string, string, string, string, string];
    const thisYear = new Date(now * 1000).getUTCFullYear();
    let full = 2000 + Number(short);
    if (full > thisYear + 50) full -= 100;
    [day, month, year, hh, mm, ss] = [d, mo, String(full), h, mi, s];
  } else if ((m = t.match(/^[A-Za-z]{3} ([A-Za-z]{3}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/))) {
    [, month, day, hh, mm, ss, year] = m as unknown as [string, string, string, string, string, string, string];
  } else {
    return undefined;
  }
  const monthIndex = MONTHS.indexOf(month.toLowerCase());
  if (monthIndex < 0) return undefined;
  const [Y, D, H, Mi, S] = [year, day, hh, mm, ss].map(Number) as [number, number, number, number, number];
  const ms = Date.UTC(Y, monthIndex, D, H, Mi, S);
  const check = new Date(ms);
  if (check.getUTCDate() !== D || H > 23 || Mi > 59 || S > 60) return undefined;
  return ms / 1000;
}

/** An RFC 3339 time with an offset (`2023-11-14T22:13:50Z`) as epoch seconds. */
export function rfc3339(text: string): number | undefined {
  const t = text.trim();
  if (t.length > MAX_DATE) return undefined;
  if (!/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})$/.test(t)) return undefined;
  const ms = Date.parse(t.replace(" ", "T"));
  return Number.isFinite(ms) ? ms / 1000 : undefined;
}

type Item = [string | undefined, Map<string, string>];

function parameters(text: string): Item[] {
  const items: Item[] = [];
  for (let part of pieces(text, ",")) {
    part = part.trim();
    if (!part) continue;
    const semi = part.indexOf(";");
    const head = (semi < 0 ? part : part.slice(0, semi)).trim();
    const rest = semi < 0 ? "" : part.slice(semi + 1);
    const params = new Map<string, string>();
    let name: string | undefined;
    if (head.includes("=")) {
      const eq = head.indexOf("=");
      params.set(head.slice(0, eq).trim().toLowerCase(), unquote(head.slice(eq + 1)));
    } else if (head) {
      name = head.replace(/^"+|"+$/g, "");
    }
    for (const param of rest ? pieces(rest, ";", 16) : []) {
      const eq = param.indexOf("=");
      const key = (eq < 0 ? param : param.slice(0, eq)).trim().toLowerCase();
      if (key) params.set(key, eq < 0 ? "" : unquote(param.slice(eq + 1)));
    }
    items.push([name, params]);
  }
  return items;
}

function unquote(text: string): string {
  return text.trim().replace(/^"+|"+$/g, "");
}

// -- several budgets as one (ratelimit/_headers/budgets.py) ------------------------------

function low(x?: number, y?: number): number | undefined {
  return x === undefined ? y : y === undefined ? x : Math.min(x, y);
}
function high(x?: number, y?: number): number | undefined {
  return x === undefined ? y : y === undefined ? x : Math.max(x, y);
}

function limitAndWindow(a: RateLimitInfo, b: RateLimitInfo): [number | undefined, number | undefined] {
  if (a.limit === undefined && b.limit === undefined) return [undefined, a.window ?? b.window];
  if (b.limit === undefined || (a.limit !== undefined && a.limit < b.limit)) return [a.limit, a.window];
  if (a.limit === undefined || b.limit < a.limit) return [b.limit, b.window];
  return [a.limit, high(a.window, b.window)];
}

function merge(a: RateLimitInfo, b: RateLimitInfo): RateLimitInfo {
  const [limit, window] = limitAndWindow(a, b);
  const telling = [a, b].filter(
    (r) => r.limit !== undefined || r.remaining !== undefined || r.resetAfter !== undefined,
  );
  return clean({
    limit,
    remaining: low(a.remaining, b.remaining),
    resetAfter: high(a.resetAfter, b.resetAfter),
    retryAfter: high(a.retryAfter, b.retryAfter),
    window,
    gradual: telling.length > 0 && telling.every((r) => r.gradual),
    refills: telling.length > 0 && telling.every((r) => r.refills),
  });
}

function pressure(budget: RateLimitInfo): [number, number, number, number] {
  const remaining = budget.remaining ?? 0;
  const reset = budget.resetAfter;
  const says = -[budget.limit, budget.window].filter((f) => f !== undefined).length;
  if (budget.gradual && reset && budget.limit !== undefined && budget.limit > remaining) {
    return [1, budget.limit / reset, -reset, says];
  }
  if (remaining <= 0 && reset !== 0) return [0, reset !== undefined ? -reset : Infinity, 0, says];
  const seconds = reset !== undefined ? reset : budget.window || 0;
  if (seconds > 0) return [1, remaining / seconds, -seconds, says];
  return [2, remaining, 0, says];
}

function before(a: number[], b: number[]): boolean {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]!;
  return false;
}

function binding(readings: RateLimitInfo[]): RateLimitInfo {
  const budgets: RateLimitInfo[] = [];
  const others: RateLimitInfo[] = [];
  for (const r of readings) {
    const timed = r.resetAfter !== undefined || r.window !== undefined;
    (r.remaining !== undefined && timed ? budgets : others).push(r);
  }
  let combined: RateLimitInfo = {};
  if (budgets.length) {
    combined = budgets[0]!;
    for (const b of budgets.slice(1)) if (before(pressure(b), pressure(combined))) combined = b;
  }
  for (const o of others) combined = merge(combined, o);
  return clean(combined);
}

// -- the dialects (ratelimit/_headers/dialects.py) ---------------------------------------

function xRateLimit(f: Fields): RateLimitInfo {
  const names = (suffix: string): [string, string] => [`x-ratelimit-${suffix}`, `x-rate-limit-${suffix}`];
  const limit = f.least(...names("limit"));
  let remaining = f.least(...names("remaining"));
  const used = f.least(...names("used"));
  if (remaining === undefined && used !== undefined && limit !== undefined) remaining = Math.max(0, limit - used);
  let reset = f.wait(f.least(...names("reset-after")));
  if (reset === undefined) reset = f.reset(...names("reset"));
  return clean({ limit, remaining, resetAfter: reset });
}

function quota(name: string | undefined, params: Map<string, string>): number | undefined {
  const q = name !== undefined ? number(name) : undefined;
  return q !== undefined ? q : number(params.get("q") ?? "");
}

function ietf(f: Fields): RateLimitInfo {
  const policies = f.texts("ratelimit-policy").flatMap(parameters);
  const items = f.texts("ratelimit").flatMap(parameters);
  const listed = ietfList(f, items, policies);
  return binding([ietfFields(f, policies, isEmpty(listed)), listed]);
}

function ietfFields(f: Fields, policies: Item[], announced: boolean): RateLimitInfo {
  let limit = f.least("ratelimit-limit");
  let remaining = f.least("ratelimit-remaining");
  const observed = f.least("ratelimit-observed");
  if (remaining === undefined && observed !== undefined && limit !== undefined) remaining = Math.max(0, limit - observed);
  let window: number | undefined;
  for (const [name, params] of policies) {
    const q = quota(name, params);
    if (q !== undefined && (q === limit || (limit === undefined && announced))) {
      limit = q;
      window = number(params.get("w") ?? "");
      break;
    }
  }
  return clean({ limit, remaining, resetAfter: f.reset("ratelimit-reset", "ratelimit-resettime"), window });
}

function ietfList(f: Fields, items: Item[], policies: Item[]): RateLimitInfo {
  const named = new Map<string, [number, number | undefined]>();
  for (const [name, params] of policies) {
    const q = number(params.get("q") ?? "");
    if (name !== undefined && q !== undefined && !named.has(name)) named.set(name, [q, number(params.get("w") ?? "")]);
  }
  const readings: RateLimitInfo[] = [];
  let loose: RateLimitInfo = {};
  for (const [name, params] of items) {
    const remaining = number(params.get("r") ?? params.get("remaining") ?? "");
    const reset = f.numericReset(number(params.get("t") ?? params.get("reset") ?? ""));
    if (name === undefined) {
      loose = merge(loose, clean({ limit: number(params.get("limit") ?? ""), remaining, resetAfter: reset }));
    } else if (remaining !== undefined) {
      const [limit, window] = named.get(name) ?? [undefined, undefined];
      const refills = limit !== undefined && Boolean(window);
      readings.push(clean({ limit, remaining, resetAfter: reset, window, refills }));
    }
  }
  if (!isEmpty(loose)) {
    let window: number | undefined;
    for (const [policy, params] of policies) {
      if (loose.limit !== undefined && quota(policy, params) === loose.limit) {
        window = number(params.get("w") ?? "");
        break;
      }
    }
    readings.push(clean({ ...loose, window }));
  }
  return binding(readings);
}

function openai(f: Fields): RateLimitInfo {
  const read = (kind: string): RateLimitInfo => {
    const resets = f
      .values(`x-ratelimit-reset-${kind}`)
      .map(duration)
      .filter((d): d is number => d !== undefined);
    return f.bucket(
      f.least(`x-ratelimit-limit-${kind}`),
      f.least(`x-ratelimit-remaining-${kind}`),
      resets.length ? Math.max(...resets) : undefined,
    );
  };
  return clean({ ...read("requests"), tokens: read("tokens") });
}

function anthropic(f: Fields): RateLimitInfo {
  const read = (kind: string): RateLimitInfo => {
    const moments = f
      .values(`anthropic-ratelimit-${kind}-reset`)
      .map(rfc3339)
      .filter((m): m is number => m !== undefined);
    return f.bucket(
      f.least(`anthropic-ratelimit-${kind}-limit`),
      f.least(`anthropic-ratelimit-${kind}-remaining`),
      moments.length ? Math.max(...moments) - f.now : undefined,
    );
  };
  return clean({ ...read("requests"), tokens: read("tokens") });
}

function retryAfter(f: Fields): RateLimitInfo {
  const waits: number[] = [];
  for (const text of f.texts("retry-after")) {
    const moment = httpDate(text, f.now);
    if (moment !== undefined) {
      waits.push(Math.max(0, moment - f.now));
      continue;
    }
    for (const n of pieces(text, ",").map(number)) if (n !== undefined) waits.push(n);
  }
  return clean({ retryAfter: waits.length ? f.wait(Math.max(...waits)) : undefined });
}

const DIALECTS = [xRateLimit, ietf, openai, anthropic, retryAfter];

function collect(headers: HeaderSource | null | undefined): Map<string, string[]> {
  const fields = new Map<string, string[]>();
  const add = (name: unknown, value: unknown): void => {
    if (fields.size > MAX_HEADERS || typeof name !== "string" || name.length > MAX_NAME) return;
    const values = Array.isArray(value) ? value : [value];
    for (const v of values) {
      if (typeof v !== "string" && typeof v !== "number") continue;
      const text = String(v);
      if (text.length > MAX_VALUE) continue;
      const key = name.trim().toLowerCase();
      const list = fields.get(key) ?? [];
      if (list.length < MAX_REPEATS) list.push(text.trim());
      fields.set(key, list);
    }
  };
  if (headers == null) return fields;
  if (headers instanceof Map) headers.forEach((v, k) => add(k, v));
  else if (typeof (headers as { forEach?: unknown }).forEach === "function" && !Array.isArray(headers)) {
    (headers as { forEach(cb: (value: string, name: string) => void): void }).forEach((v, k) => add(k, v));
  } else if (Symbol.iterator in Object(headers)) {
    for (const pair of headers as Iterable<unknown>) if (Array.isArray(pair) && pair.length === 2) add(pair[0], pair[1]);
  } else {
    for (const [k, v] of Object.entries(headers)) add(k, v);
  }
  return fields;
}

/** Read a response's rate-limit headers. `now`: epoch seconds (default the clock). */
export function parseRateLimitHeaders(
  headers: HeaderSource | null | undefined,
  options: { now?: number; cap?: number } = {},
): RateLimitInfo {
  const cap = options.cap ?? DEFAULT_CAP;
  if (!(typeof cap === "number" && cap > 0)) throw new RangeError(`cap must be a number > 0, got ${String(cap)}`);
  const fields = new Fields(collect(headers), options.now ?? Date.now() / 1000, cap);
  const readings = DIALECTS.map((dialect) => dialect(fields));
  const primary = binding(readings.map(({ tokens: _tokens, ...rest }) => rest));
  const tokens = binding(readings.map((r) => r.tokens).filter((t): t is RateLimitInfo => t !== undefined));
  return clean({ ...primary, tokens: isEmpty(tokens) ? undefined : tokens });
}

// -- what a response asks of a limiter (ratelimit/_limiting/feedback.py) ------------------

function policy(info: RateLimitInfo): number | undefined {
  const { limit, window } = info;
  if (limit === undefined || !window || !(limit > 0)) return undefined;
  return limit / window;
}

function whole(remaining: number, reset: number): [number, number] | undefined {
  return remaining >= 1 ? [remaining, reset] : undefined;
}

function paced(info: RateLimitInfo, remaining: number, reset: number): [number, number] | undefined {
  const limit = info.limit;
  if (info.gradual && limit !== undefined && limit > remaining && limit >= 1) return [limit, reset];
  const pace = info.refills ? policy(info) : undefined;
  if (pace !== undefined && (remaining >= 1 || reset <= 1)) {
    const refill = pace * reset;
    return refill > remaining && refill >= 1 ? [refill, reset] : whole(remaining, reset);
  }
  return whole(remaining, reset);
}

function untilMore(info: RateLimitInfo, reset: number): number {
  const { limit, remaining } = info;
  if (info.gradual && limit !== undefined && remaining !== undefined && limit > remaining) {
    return reset / Math.max(1, limit - remaining);
  }
  const pace = info.refills ? policy(info) : undefined;
  if (reset <= 1 && pace !== undefined && 1 / pace < reset) return 1 / pace;
  return reset;
}

/**
 * `[remaining, seconds]`: at most `remaining` more in the next `seconds`, spread evenly
 * (a pause below one); `undefined` where the response asks nothing.
 */
export function restriction(info: RateLimitInfo, status?: number): [number, number] | undefined {
  const refused = status === 429 || status === 503;
  if (info.retryAfter !== undefined && info.retryAfter > 0 && (refused || status === undefined)) {
    return [0, info.retryAfter];
  }
  const reset = info.resetAfter;
  if (reset !== undefined && reset > 0) {
    if (status === 429) return [0, untilMore(info, reset)];
    if (info.remaining !== undefined) return paced(info, info.remaining, reset) ?? [0, untilMore(info, reset)];
  }
  return undefined;
}
