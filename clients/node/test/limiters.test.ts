/**
 * The limiters against a real Redis, on a test clock (the time sent as `now`): what
 * each decision grants, reserve and cancel, feedback's pause, the script fallback, the
 * keys a Python limiter of the same name reads, and bad arguments.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";

import { AcquireTimeout, LeakyBucket, RedisBackend, SlidingWindow, TokenBucket } from "../src/index.js";
import { ManualClock, backend, forget, uniqueName } from "./helpers.js";

const b = backend();
const names: string[] = [];
after(async () => {
  try {
    for (const name of names) await forget(b, name);
  } finally {
    await b.close(); // a server down: the client would retry for ever, and the run never end
  }
});

function named(prefix: string): string {
  const name = uniqueName(prefix);
  names.push(name);
  return name;
}

test("a token bucket grants its burst, then one token per interval", async () => {
  const clock = new ManualClock();
  const bucket = new TokenBucket({ capacity: 3, refillPerSec: 2, backend: b, name: named("tb"), clock });
  const got = [];
  for (let i = 0; i < 4; i++) got.push(await bucket.tryAcquire());
  assert.deepEqual(got, [true, true, true, false]);
  clock.advance(0.5);
  assert.equal(await bucket.tryAcquire(), true);
  assert.equal(await bucket.tryAcquire(), false);
  // acquire waits the wait the store reserved, on the test clock.
  const before = clock.now();
  assert.equal(await bucket.acquire(1), 0.5);
  assert.equal(clock.now() - before, 0.5);
});

test("an acquire that would wait past its timeout reserves nothing and says the wait", async () => {
  const clock = new ManualClock();
  const bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend: b, name: named("timeout"), clock });
  await bucket.acquire(2);
  await assert.rejects(bucket.acquire(1, { timeout: 0.5 }), (error: unknown) => {
    assert.ok(error instanceof AcquireTimeout);
    assert.equal(error.retryAfter, 1);
    return true;
  });
  assert.equal(await bucket.acquire(1, { timeout: 1 }), 1); // nothing was reserved by the refusal
});

test("a reservation cancelled before it is due gives its place to the next request", async () => {
  const clock = new ManualClock();
  const bucket = new TokenBucket({ capacity: 1, refillPerSec: 1, backend: b, name: named("cancel"), clock });
  assert.equal(await bucket.tryAcquire(), true);
  const first = await bucket.reserve();
  assert.equal(first.wait, 1);
  assert.equal(await first.cancel(), true);
  assert.equal(await first.cancel(), false); // once
  const second = await bucket.reserve();
  assert.equal(second.wait, 1); // the place given back, not the one after it
  clock.advance(1);
  assert.equal(await second.cancel(), false); // due: too late to give back
});

test("feedback: a 429 with Retry-After pauses the budget in Redis", async () => {
  const clock = new ManualClock();
  const name = named("pause");
  const bucket = new TokenBucket({ capacity: 10, refillPerSec: 10, backend: b, name, clock });
  const info = await bucket.feedback({ "Retry-After": "3" }, 429);
  assert.equal(info.retryAfter, 3);
  assert.equal(await bucket.tryAcquire(), false);
  // Another limiter on the same name, as another process would hold, waits it out too.
  const other = new TokenBucket({ capacity: 10, refillPerSec: 10, backend: b, name, clock });
  await assert.rejects(other.acquire(1, { timeout: 2 }), AcquireTimeout);
  clock.advance(3);
  assert.equal(await other.tryAcquire(), true);
  // A success with nothing to say changes nothing.
  assert.deepEqual(await bucket.feedback({ "content-type": "text/plain" }, 200), {});
});

test("a leaky bucket spaces its grants and queues at most its capacity", async () => {
  const clock = new ManualClock();
  const leaky = new LeakyBucket({ capacity: 3, leakPerSec: 1, backend: b, name: named("lb"), clock });
  assert.equal(await leaky.acquire(), 0);
  assert.equal((await leaky.reserve()).wait, 1);
  assert.equal((await leaky.reserve()).wait, 2); // in line after the first
  assert.equal(await leaky.tryAcquire(), false);
});

test("a sliding window never grants more than its limit in a window", async () => {
  const clock = new ManualClock();
  const window = new SlidingWindow({ limit: 3, windowSeconds: 10, backend: b, name: named("sw"), clock });
  const got = [];
  for (let i = 0; i < 4; i++) {
    got.push(await window.tryAcquire());
    clock.advance(1);
  }
  assert.deepEqual(got, [true, true, true, false]);
  const reservation = await window.reserve();
  assert.equal(reservation.wait, 6); // the first leaves the window at 1010
});

test("an approximate sliding window (the sub-window counter) holds its limit too", async () => {
  const clock = new ManualClock();
  const name = named("swc");
  const window = new SlidingWindow({ limit: 3, windowSeconds: 10, approximate: true, backend: b, name, clock });
  const got = [];
  for (let i = 0; i < 4; i++) got.push(await window.tryAcquire());
  assert.deepEqual(got, [true, true, true, false]);
  assert.equal(await b.client.exists(`ratelimit:{${name}}:injected:sliding_window_counter`), 1);
});

test("the first call writes what the code says, for `ratelimit inspect` and `top`", async () => {
  const name = named("code");
  const bucket = new TokenBucket({ capacity: 20, refillPerSec: 100, backend: b, name });
  assert.equal(await bucket.tryAcquire(), true);
  const code = await b.client.hmget(`ratelimit:{${name}}:code`, "kind", "p1", "p2", "slack", "shadow");
  assert.deepEqual(code, ["token_bucket", "20.0", "100.0", "0.0", "0"]);
  assert.ok((await b.client.exists(`ratelimit:{${name}}:token_bucket`)) === 1);
});

test("a server without Functions is called by script, with the same decisions", async () => {
  const scripted = backend();
  scripted.callByScript();
  try {
    const clock = new ManualClock();
    const bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend: scripted, name: named("script"), clock });
    assert.deepEqual([await bucket.tryAcquire(), await bucket.tryAcquire(), await bucket.tryAcquire()], [true, true, false]);
  } finally {
    await scripted.close();
  }
});

test("names with braces and percent signs are escaped in the hash tag", async () => {
  const name = named("a{b}%c");
  const bucket = new TokenBucket({ capacity: 1, refillPerSec: 1, backend: b, name });
  assert.equal(await bucket.tryAcquire(), true);
  const escaped = name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D");
  assert.equal(await b.client.exists(`ratelimit:{${escaped}}:token_bucket`), 1);
  names.push(escaped);
});

test("bad arguments are refused at once, naming the argument", async () => {
  const name = named("bad");
  assert.throws(() => new TokenBucket({ capacity: 0, refillPerSec: 1, backend: b, name }), /capacity must be/);
  assert.throws(() => new TokenBucket({ capacity: 5, refillPerSec: -1, backend: b, name }), /refillPerSec must be/);
  assert.throws(
    () => new TokenBucket({ capacity: "5" as unknown as number, refillPerSec: 1, backend: b, name }),
    TypeError,
  );
  assert.throws(() => new TokenBucket({ capacity: 5, refillPerSec: 1, backend: b, name: "" }), /name must be/);
  assert.throws(
    () => new TokenBucket({ capacity: 5, refillPerSec: 1, backend: {} as RedisBackend, name }),
    /backend must be a RedisBackend/,
  );
  assert.throws(() => new SlidingWindow({ limit: 5, windowSeconds: 0, backend: b, name }), /windowSeconds/);
  assert.throws(() => new LeakyBucket({ capacity: 5, leakPerSec: Infinity, backend: b, name }), /leakPerSec/);
  assert.throws(() => RedisBackend.fromUrl("http://example.com"), /redis:\/\//);
  const bucket = new TokenBucket({ capacity: 5, refillPerSec: 1, backend: b, name });
  await assert.rejects(bucket.acquire(6), /tokens=6 can never be granted/);
  await assert.rejects(bucket.acquire(0), /tokens must be/);
  await assert.rejects(bucket.acquire(1, { timeout: -1 }), /timeout must be/);
  await assert.rejects(bucket.tryAcquire(Number.NaN), TypeError);
  await assert.rejects(bucket.feedback({}, 42), /status must be/);
});

test("a closed backend fails clearly", async () => {
  const closed = backend();
  await closed.close();
  const bucket = new TokenBucket({ capacity: 1, refillPerSec: 1, backend: closed, name: named("closed") });
  await assert.rejects(bucket.tryAcquire(), /closed/);
});
