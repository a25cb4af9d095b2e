import { randomUUID } from "node:crypto";

import { RedisBackend } from "../src/index.js";

/** The server the tests run on: REDIS_URL, as the Python suite's. Unreachable, they
 * fail (CI sets no switch to skip them). */
export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379/0";

export function backend(): RedisBackend {
  return RedisBackend.fromUrl(REDIS_URL, { connectTimeout: 3 });
}

/** A name no other run uses. */
export function uniqueName(prefix = "node"): string {
  return `${prefix}-${randomUUID().slice(0, 12)}`;
}

/** A test's clock: it moves only when told to, or when an acquire sleeps on it. */
export class ManualClock {
  constructor(public t = 1_000) {}
  now(): number {
    return this.t;
  }
  async sleep(seconds: number): Promise<void> {
    this.t += seconds;
  }
  advance(seconds: number): void {
    this.t += seconds;
  }
}

/** Delete every key of a name (tests leave nothing behind on a shared server). */
export async function forget(b: RedisBackend, name: string): Promise<void> {
  const keys = await b.client.keys(`ratelimit:{${name}}*`);
  if (keys.length) await b.client.del(...keys);
}
