/**
 * The connection to Redis and the way each call goes (docs/protocol.md, "The function
 * library"): an FCALL of `ratelimit_p1_<function>`; at the first call, and on "Function
 * not found", the library listed and loaded only where the server has none or an older
 * revision, then called (again); on a server without Functions, the function's script by SHA (EVAL on NOSCRIPT).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

import { Redis, type RedisOptions } from "ioredis";

import { BackendUnavailable } from "./errors.js";

interface Artifact {
  protocol: number;
  revision: number;
  name: string;
  library: string;
  scripts: Record<string, string>;
}

const artifact = JSON.parse(
  readFileSync(new URL("../../generated/library.json", import.meta.url), "utf8"),
) as Artifact;

/** The protocol this client speaks, and the revision of the library text it ships. */
export const PROTOCOL = artifact.protocol;
export const REVISION = artifact.revision;
/** The library's name on the server: `ratelimit_p<protocol>`. */
export const LIBRARY = artifact.name;

const NOT_LOADED = "Function not found";
const REFUSED = /unknown command|unknown subcommand|NOPERM|no permission|not supported|disabled|not allowed/i;
const FUNCTIONS = /\b(fcall|function)\b/i;

/** Whether an error reply says the server has no Functions or forbids them. */
export function refusesFunctions(message: string): boolean {
  return (
    !message.includes("user_function") &&
    !message.includes(NOT_LOADED) &&
    REFUSED.test(message) &&
    FUNCTIONS.test(message)
  );
}

function fields(entry: unknown): Map<string, unknown> {
  const map = new Map<string, unknown>();
  if (Array.isArray(entry)) {
    for (let i = 0; i + 1 < entry.length; i += 2) map.set(String(entry[i]), entry[i + 1]);
  } else if (entry && typeof entry === "object") {
    for (const [k, v] of Object.entries(entry)) map.set(k, v);
  }
  return map;
}

/** The revision of this protocol's library in a `FUNCTION LIST` reply: `undefined`
 * where it is not loaded, 0 where it says none. */
export function listedRevision(listed: unknown): number | undefined {
  if (!Array.isArray(listed)) return undefined;
  for (const entry of listed) {
    const lib = fields(entry);
    if (String(lib.get("library_name")) !== LIBRARY) continue;
    for (const fn of (lib.get("functions") as unknown[]) ?? []) {
      const found = /\brevision (\d+)\b/.exec(String(fields(fn).get("description") ?? ""));
      if (found) return Number(found[1]);
    }
    return 0;
  }
  return undefined;
}

function isReplyError(error: unknown): error is Error {
  return error instanceof Error && error.name === "ReplyError";
}

export interface BackendOptions {
  /** Seconds to wait for a connection before a call fails (default 5). */
  connectTimeout?: number;
  /** Anything else for ioredis. */
  redis?: RedisOptions;
}

/** A Redis server shared by every process, of every language, that limits through it. */
export class RedisBackend {
  /** The ioredis client. */
  readonly client: Redis;
  /** The client's database: a database other than 0 marks each op with `!`. */
  readonly db: number;
  // true: calls functions; false: scripts (no Functions on this server, or none allowed).
  private byFunction = true;
  // Whether the first call has looked at the revision the server holds (see call).
  private checked = false;
  private readonly shas = new Map<string, string>();
  private closed = false;

  constructor(client: Redis) {
    if (!(client instanceof Redis)) throw new TypeError(`client must be an ioredis Redis, got ${String(client)}`);
    this.client = client;
    this.db = Number(client.options.db ?? 0);
  }

  /** A backend on `url` (`redis://[:password@]host[:port][/db]`, `rediss://` for TLS). */
  static fromUrl(url: string, options: BackendOptions = {}): RedisBackend {
    if (typeof url !== "string" || !/^rediss?:\/\//.test(url)) {
      throw new TypeError(`url must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`);
    }
    const connectTimeout = options.connectTimeout ?? 5;
    if (!(typeof connectTimeout === "number" && connectTimeout > 0)) {
      throw new RangeError(`connectTimeout must be seconds > 0, got ${String(connectTimeout)}`);
    }
    const client = new Redis(url, {
      connectTimeout: connectTimeout * 1000,
      maxRetriesPerRequest: 1,
      ...options.redis,
    });
    // Failures reach the caller of each call as BackendUnavailable; the client's own
    // reconnection errors are not unhandled events.
    client.on("error", () => undefined);
    return new RedisBackend(client);
  }

  /** Call function `fn` of the library (`token_bucket`...) with `keys` and `args`. */
  async call(fn: string, keys: string[], args: string[]): Promise<unknown> {
    if (this.closed) throw new BackendUnavailable("the backend is closed");
    try {
      if (this.byFunction && !this.checked) {
        // A server may hold an older revision with every function, whose text lacks
        // what this one fixed: the first call looks, and loads this one over it.
        await this.load();
        this.checked = true;
      }
      if (this.byFunction) {
        try {
          return await this.fcall(fn, keys, args);
        } catch (error) {
          if (!isReplyError(error)) throw error;
          if (error.message.includes(NOT_LOADED)) {
            if (await this.load()) {
              try {
                return await this.fcall(fn, keys, args);
              } catch (again) {
                if (!(isReplyError(again) && again.message.includes(NOT_LOADED))) throw again;
              }
            }
          } else if (refusesFunctions(error.message)) {
            this.byFunction = false;
          } else {
            throw error;
          }
        }
      }
      return await this.script(fn, keys, args);
    } catch (error) {
      if (isReplyError(error)) throw new BackendUnavailable(`Redis refused ${fn}: ${error.message}`, { cause: error });
      if (error instanceof BackendUnavailable) throw error;
      throw new BackendUnavailable(`Redis cannot be reached: ${String((error as Error)?.message ?? error)}`, {
        cause: error,
      });
    }
  }

  private fcall(fn: string, keys: string[], args: string[]): Promise<unknown> {
    return this.client.call("FCALL", `${LIBRARY}_${fn}`, keys.length, ...keys, ...args);
  }

  /** Load the library unless the server holds this revision or a newer one; false:
   * call by script instead (the server refuses Functions, or is full). */
  private async load(): Promise<boolean> {
    let revision: number | undefined;
    try {
      revision = listedRevision(await this.client.call("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY));
    } catch (error) {
      if (!isReplyError(error)) throw error;
    }
    if (revision !== undefined && revision >= REVISION) return true;
    try {
      await this.client.call("FUNCTION", "LOAD", "REPLACE", artifact.library);
      return true;
    } catch (error) {
      if (!isReplyError(error)) throw error;
      if (refusesFunctions(error.message)) {
        this.byFunction = false;
        return false;
      }
      if (error.message.startsWith("OOM")) return false;
      throw error;
    }
  }

  private async script(fn: string, keys: string[], args: string[]): Promise<unknown> {
    const source = artifact.scripts[fn];
    if (source === undefined) throw new BackendUnavailable(`no script of ${fn} for a server without Functions`);
    let sha = this.shas.get(fn);
    if (sha === undefined) {
      sha = createHash("sha1").update(source, "utf8").digest("hex");
      this.shas.set(fn, sha);
    }
    try {
      return await this.client.call("EVALSHA", sha, keys.length, ...keys, ...args);
    } catch (error) {
      if (isReplyError(error) && error.message.startsWith("NOSCRIPT")) {
        return await this.client.call("EVAL", source, keys.length, ...keys, ...args);
      }
      throw error;
    }
  }

  /** Calls go by script from now on (benchmarks, tests of servers without Functions). */
  callByScript(): void {
    this.byFunction = false;
  }

  /** Close the connection; later calls fail with BackendUnavailable. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    // QUIT on a connection that is up; one still connecting (a server down) is dropped,
    // since QUIT would wait for it.
    if (this.client.status !== "ready") {
      this.client.disconnect();
      return;
    }
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }
}
