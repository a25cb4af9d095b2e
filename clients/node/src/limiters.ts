/**
 * The limiters: each decision one call of the library's function for its algorithm
 * (docs/protocol.md, "Calling a single limiter"), on the keys a Python limiter of the
 * same name uses, so that both decide against one budget.
 */
import { performance } from "node:perf_hooks";
import { setTimeout as sleepMs } from "node:timers/promises";

import { RedisBackend } from "./backend.js";
import { AcquireTimeout, BackendUnavailable } from "./errors.js";
import { type HeaderSource, type RateLimitInfo, parseRateLimitHeaders, restriction } from "./headers.js";
import { type LimiterKeys, keysOf } from "./keys.js";
import { fromText, num } from "./numbers.js";

/** How often a limiter passes its `code` key, which `ratelimit inspect`/`top` read. */
const CODE_EVERY = 60;

/** A test's time, in seconds: what the calls are sent as `now` instead of the server's
 * TIME, and how an acquire waits. Its state is kept apart from real time's. */
export interface Clock {
  now(): number;
  sleep(seconds: number): Promise<void>;
}

export interface SharedOptions {
  backend: RedisBackend;
  /** The budget's name: every process, in any language, that names it shares it. */
  name: string;
  /** Seconds of send jitter kept room for, as the Python `guard=` (see the protocol). */
  guard?: number;
  /** `false`: the decisions are not counted for `ratelimit top`. */
  counters?: boolean;
  clock?: Clock;
}

export interface AcquireOptions {
  /** The longest wait accepted, seconds; longer: AcquireTimeout, nothing reserved. */
  timeout?: number;
}

interface Decision {
  wait: number;
  atText: string;
  name: string;
}

function real(argument: string, value: unknown): number {
  if (typeof value !== "number" || Number.isNaN(value)) {
    throw new TypeError(`${argument} must be a number, got ${JSON.stringify(value) ?? String(value)}`);
  }
  return value;
}

function positive(argument: string, value: unknown, { infinite = false } = {}): number {
  const n = real(argument, value);
  if (!(n > 0) || (!infinite && !Number.isFinite(n))) {
    throw new RangeError(`${argument} must be ${infinite ? "" : "a finite number "}> 0, got ${String(value)}`);
  }
  return n;
}

function atLeastZero(argument: string, value: unknown, { infinite = false } = {}): number {
  const n = real(argument, value);
  if (!(n >= 0) || (!infinite && !Number.isFinite(n))) {
    throw new RangeError(`${argument} must be ${infinite ? "" : "a finite number "}>= 0, got ${String(value)}`);
  }
  return n;
}

/** A reservation: the tokens are the caller's after `wait` seconds; `cancel()` gives
 * them back while it is not yet due. */
export class Reservation {
  private cancelled = false;

  constructor(
    readonly tokens: number,
    /** Seconds to wait before going. */
    readonly wait: number,
    private readonly deadline: number,
    private readonly now: () => number,
    private readonly giveBack: () => Promise<void>,
  ) {}

  /** Give the reservation back if it is not yet due; whether it was. Requests queued
   * behind it keep their times; its place goes to a later request that fits. */
  async cancel(): Promise<boolean> {
    if (this.cancelled || !(this.now() < this.deadline)) return false;
    this.cancelled = true;
    try {
      await this.giveBack();
    } catch (error) {
      this.cancelled = false;
      throw error;
    }
    return true;
  }
}

/** What every limiter shares: the call, the keys, the waits. */
export abstract class Limiter {
  readonly name: string;
  readonly backend: RedisBackend;
  /** The most one request may take. */
  protected abstract readonly most: number;
  private readonly keys: LimiterKeys;
  private readonly clock: Clock | undefined;
  private readonly mark: string;
  private codeDue = -Infinity;

  protected constructor(
    protected readonly kind: string,
    protected readonly params: readonly [number, number, number],
    options: SharedOptions,
  ) {
    if (!(options.backend instanceof RedisBackend)) {
      throw new TypeError(`backend must be a RedisBackend, got ${String(options.backend)}`);
    }
    if (typeof options.name !== "string" || options.name === "") {
      throw new TypeError(`name must be a non-empty string, got ${JSON.stringify(options.name)}`);
    }
    if (options.clock !== undefined && typeof options.clock?.now !== "function") {
      throw new TypeError("clock must have now() and sleep(seconds)");
    }
    this.name = options.name;
    this.backend = options.backend;
    this.clock = options.clock;
    this.keys = keysOf(options.name, kind, options.clock !== undefined);
    const counted = options.counters ?? true;
    const elsewhere = this.backend.db !== 0;
    this.mark = counted ? (elsewhere ? "!" : "") : elsewhere ? "^" : "~";
  }

  private localNow(): number {
    return this.clock ? this.clock.now() : performance.now() / 1000;
  }

  private async send(op: string, a: string, b: string): Promise<unknown> {
    const { base, config, code } = this.keys;
    let keys = [base, config];
    const local = performance.now() / 1000;
    if (local >= this.codeDue) {
      this.codeDue = local + CODE_EVERY;
      keys = [base, config, code];
    }
    const now = this.clock ? num(this.clock.now()) : "";
    const [p1, p2, slack] = this.params;
    const args = [this.mark + op, now, a, b, num(p1), num(p2), num(slack), "0"];
    try {
      return await this.backend.call(this.kind, keys, args);
    } catch (error) {
      this.codeDue = -Infinity; // the code may have been due with the call that failed
      throw error;
    }
  }

  private checked(tokens: unknown): number {
    const n = positive("tokens", tokens);
    if (n > this.most) {
      throw new RangeError(`tokens=${n} can never be granted: ${this.describeMost()} (${this.most})`);
    }
    return n;
  }

  protected abstract describeMost(): string;

  private async decide(tokens: number, maxWait: number): Promise<Decision> {
    const reply = await this.send("reserve", num(tokens), maxWait === Infinity ? "" : num(maxWait));
    if (typeof reply === "string") return { wait: 0, atText: reply, name: "" };
    if (!Array.isArray(reply) || reply.length < 2) {
      throw new BackendUnavailable(`an unexpected reply to reserve: ${JSON.stringify(reply)}`);
    }
    // Fields past the third are a later revision's (docs/protocol.md): ignored.
    return { wait: fromText(reply[0]), atText: String(reply[1]), name: String(reply[2] ?? "") };
  }

  /** Take `tokens`, waiting for them; the seconds waited. Throws AcquireTimeout (nothing
   * reserved) if that would take longer than `timeout`. */
  async acquire(tokens: number = 1, options: AcquireOptions = {}): Promise<number> {
    const n = this.checked(tokens);
    const timeout = options.timeout === undefined ? Infinity : atLeastZero("timeout", options.timeout, { infinite: true });
    const { wait } = await this.decide(n, timeout);
    if (wait < 0) {
      throw new AcquireTimeout(
        `${this.name}: ${n} token(s) need a wait of ${-wait}s, longer than timeout=${timeout}s`,
        -wait,
      );
    }
    if (wait > 0) await this.sleep(wait);
    return wait;
  }

  /** Take `tokens` if they are there now; whether they were. */
  async tryAcquire(tokens: number = 1): Promise<boolean> {
    const n = this.checked(tokens);
    const { wait } = await this.decide(n, 0);
    return wait >= 0 && wait <= 0;
  }

  /** Reserve `tokens` in the queue without waiting: go after `.wait` seconds, or
   * `.cancel()` to give them back. */
  async reserve(tokens: number = 1): Promise<Reservation> {
    const n = this.checked(tokens);
    const started = this.localNow();
    const { wait, atText, name } = await this.decide(n, Infinity);
    if (wait < 0) {
      throw new AcquireTimeout(`${this.name}: ${n} token(s) can never be granted at the limit in force`, -wait);
    }
    const grant = name === "" ? atText : `${atText} ${name}`;
    return new Reservation(
      n,
      wait,
      started + wait,
      () => this.localNow(),
      async () => {
        await this.send("refund", num(n), grant);
      },
    );
  }

  /**
   * Correct the budget from a response's rate-limit headers (and status); what they
   * said. A 429 (or 503) with `Retry-After` pauses every process of every language
   * sharing the budget; `remaining` with a reset spreads what remains over it.
   */
  async feedback(headers: HeaderSource | null | undefined, status?: number): Promise<RateLimitInfo> {
    if (status !== undefined && !(Number.isInteger(status) && status >= 100 && status <= 599)) {
      throw new RangeError(`status must be an HTTP status (100-599), got ${String(status)}`);
    }
    const info = parseRateLimitHeaders(headers);
    const change = restriction(info, status);
    if (change !== undefined) await this.send("restrict", num(change[0]), num(change[1]));
    return info;
  }

  private sleep(seconds: number): Promise<void> {
    if (this.clock) return this.clock.sleep(seconds);
    // Never early: a timer may fire up to a millisecond before its rounded delay.
    return sleepMs(Math.ceil(seconds * 1000));
  }
}

export interface TokenBucketOptions extends SharedOptions {
  /** The burst: tokens the bucket holds. */
  capacity: number;
  /** Tokens back per second (`Infinity`: no limit; 0: an allowance never refilled). */
  refillPerSec: number;
}

/** A token bucket (GCRA): `capacity` at once, `refillPerSec` after. */
export class TokenBucket extends Limiter {
  protected readonly most: number;

  constructor(options: TokenBucketOptions) {
    const capacity = positive("capacity", options?.capacity);
    const rate = atLeastZero("refillPerSec", options.refillPerSec, { infinite: true });
    const guard = atLeastZero("guard", options.guard ?? 0);
    // The guard is kept back from the burst (docs/protocol.md: "Parameters and the guard").
    const kept = rate === Infinity ? capacity : capacity - guard * rate;
    if (guard > 0 && (kept < Math.min(1, capacity) - 1e-9 || !(kept > 1e-9))) {
      throw new RangeError(
        `guard=${guard} keeps back ${guard * rate} tokens at ${rate}/s, leaving ${Math.max(kept, 0)} of ` +
          `capacity=${capacity}: less than one request; lower the guard or raise the capacity`,
      );
    }
    super("token_bucket", [kept, rate, guard], options);
    this.most = rate === Infinity ? Infinity : kept;
  }

  protected describeMost(): string {
    return this.params[2] > 0 ? "more than the capacity less what guard keeps back" : "more than the capacity";
  }
}

export interface LeakyBucketOptions extends SharedOptions {
  /** The queue's length, in tokens. */
  capacity: number;
  /** Tokens leaked per second. */
  leakPerSec: number;
}

/** A leaky bucket: grants spaced `1 / leakPerSec` apart, at most `capacity` queued. */
export class LeakyBucket extends Limiter {
  protected readonly most: number;

  constructor(options: LeakyBucketOptions) {
    const capacity = positive("capacity", options?.capacity);
    const rate = positive("leakPerSec", options.leakPerSec);
    const guard = atLeastZero("guard", options.guard ?? 0);
    super("leaky_bucket", [capacity, guard > 0 ? 1 / (1 / rate + guard) : rate, guard], options);
    this.most = capacity;
  }

  protected describeMost(): string {
    return "more than the capacity";
  }
}

export interface SlidingWindowOptions extends SharedOptions {
  /** Tokens in any window. */
  limit: number;
  /** The window's length, seconds. */
  windowSeconds: number;
  /** The O(1) sub-window counter instead of the exact log. */
  approximate?: boolean;
}

/** At most `limit` tokens in any `windowSeconds` (default guard 0.05 s, as Python's). */
export class SlidingWindow extends Limiter {
  protected readonly most: number;

  constructor(options: SlidingWindowOptions) {
    const limit = positive("limit", options?.limit);
    const window = positive("windowSeconds", options.windowSeconds);
    const guard = atLeastZero("guard", options.guard ?? (options.clock ? 0 : 0.05));
    super(options.approximate ? "sliding_window_counter" : "sliding_window", [limit, window + guard, guard], options);
    this.most = limit;
  }

  protected describeMost(): string {
    return "more than the limit";
  }
}
