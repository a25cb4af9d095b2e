/**
 * The cost of a Node decision against an empty FCALL from Node, in one run on one
 * connection: calls per second of `tryAcquire` (a granted token, the function's fast
 * path) and of `FCALL ratelimit_p1_revision 0` (a function that reads nothing), one
 * at a time and 64 in flight, in short interleaved rounds; the ratio is what the
 * README states. Between them, the same FCALL as the decision's with its arguments
 * made once (`raw`): what the client itself adds to a decision is decision / raw.
 *
 *   REDIS_URL=redis://127.0.0.1:6379/0 npm run bench
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";

import { LIBRARY, RedisBackend, TokenBucket } from "../src/index.js";

const url = process.env.REDIS_URL ?? "redis://127.0.0.1:6379/0";
const SECONDS = Number(process.env.BENCH_SECONDS ?? 0.25);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);

async function rate(call: () => Promise<unknown>, inFlight: number): Promise<number> {
  let done = 0;
  const stop = performance.now() + SECONDS * 1000;
  const loop = async (): Promise<void> => {
    while (performance.now() < stop) {
      await call();
      done += 1;
    }
  };
  const start = performance.now();
  await Promise.all(Array.from({ length: inFlight }, loop));
  return done / ((performance.now() - start) / 1000);
}

const backend = RedisBackend.fromUrl(url);
const name = `bench-node-${randomUUID().slice(0, 8)}`;
const bucket = new TokenBucket({ capacity: 1e9, refillPerSec: 1e9, backend, name });
const empty = (): Promise<unknown> => backend.client.call("FCALL", `${LIBRARY}_revision`, 0);
const decide = (): Promise<boolean> => bucket.tryAcquire();
const keys = [`ratelimit:{${name}}:token_bucket`, `ratelimit:{${name}}:config`];
const args = ["reserve", "", "1.0", "0.0", "1000000000.0", "1000000000.0", "0.0", "0"];
const raw = (): Promise<unknown> => backend.client.call("FCALL", `${LIBRARY}_token_bucket`, 2, ...keys, ...args);
await decide(); // loads the library if need be, writes the code key once
for (const inFlight of [1, 64]) {
  // Short rounds, interleaved: a neighbour's load on a shared machine falls on both
  // alike; the median of the rounds' ratios, and each one's best rate.
  const ratios: number[] = [];
  const clientShare: number[] = [];
  let bestEmpty = 0;
  let bestDecision = 0;
  for (let round = 0; round < ROUNDS; round++) {
    const e = await rate(empty, inFlight);
    const r = await rate(raw, inFlight);
    const d = await rate(decide, inFlight);
    ratios.push(e / d);
    clientShare.push(r / d);
    bestEmpty = Math.max(bestEmpty, e);
    bestDecision = Math.max(bestDecision, d);
  }
  const median = (xs: number[]): number => xs.sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  console.log(
    `${inFlight} in flight: empty FCALL ${bestEmpty.toFixed(0)}/s, decision ${bestDecision.toFixed(0)}/s (best of ` +
      `${ROUNDS}); a decision costs ${median(ratios).toFixed(2)}x an empty FCALL, ` +
      `${median(clientShare).toFixed(2)}x the same FCALL sent raw (medians of the rounds)`,
  );
}
const written = await backend.client.keys(`ratelimit:{${name}}*`);
if (written.length) await backend.client.del(...written);
await backend.close();
