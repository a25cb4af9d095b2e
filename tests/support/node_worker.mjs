// A Node.js worker for the tests of one budget across languages
// (tests/stores/test_across_languages.py), on the Node client built in clients/node/dist.
//
//   node node_worker.mjs URL NAME bucket CAPACITY RATE LOOPS SECONDS
//   node node_worker.mjs URL NAME window LIMIT WINDOW LOOPS SECONDS
//       LOOPS concurrent acquires in a loop for SECONDS; prints {"grants": [[earliest,
//       latest]...], "calls": n}: for each grant the earliest and the latest epoch time
//       it can have been granted at (before the call plus the wait, after the sleep),
//       as languages_worker.py does
//   node node_worker.mjs URL NAME pause CAPACITY RATE RETRY_AFTER
//       feeds back a 429 with Retry-After: RETRY_AFTER; prints {"fed": epoch seconds
//       just before}
//   node node_worker.mjs URL NAME wait CAPACITY RATE
//       one acquire; prints {"waited": seconds, "at": epoch seconds once granted}
import { performance } from "node:perf_hooks";

import { AcquireTimeout, RedisBackend, SlidingWindow, TokenBucket } from "../../clients/node/dist/src/index.js";

const [url, name, mode, a, b, c, d] = process.argv.slice(2);
const backend = RedisBackend.fromUrl(url);
const epoch = () => (performance.timeOrigin + performance.now()) / 1000;

const limiter =
  mode === "window"
    ? new SlidingWindow({ limit: Number(a), windowSeconds: Number(b), backend, name })
    : new TokenBucket({ capacity: Number(a), refillPerSec: Number(b), backend, name });

let out;
if (mode === "pause") {
  const fed = epoch();
  await limiter.feedback({ "Retry-After": c }, 429);
  out = { fed };
} else if (mode === "wait") {
  const waited = await limiter.acquire();
  out = { waited, at: epoch() };
} else {
  const stop = epoch() + Number(d);
  const grants = [];
  let calls = 0;
  const loop = async () => {
    for (;;) {
      const left = stop - epoch();
      if (left <= 0) return;
      calls += 1;
      const sent = epoch();
      let waited;
      try {
        waited = await limiter.acquire(1, { timeout: left });
      } catch (error) {
        if (error instanceof AcquireTimeout) return;
        throw error;
      }
      grants.push([sent + waited, epoch()]);
    }
  };
  await Promise.all(Array.from({ length: Number(c) }, loop));
  out = { grants, calls };
}
await backend.close();
process.stdout.write(JSON.stringify(out) + "\n");
