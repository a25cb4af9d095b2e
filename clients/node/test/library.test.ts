/**
 * The library on a private server of this test's own (redis-server on a free loopback
 * port, stopped by its pid): loaded by the first call on a server without it; an older
 * revision lacking the function called replaced; a newer one kept, the call going by
 * script; a server that renames FCALL away called by script from the start.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { test } from "node:test";

import { Redis } from "ioredis";

import { LIBRARY, REVISION, RedisBackend, TokenBucket } from "../src/index.js";
import { listedRevision } from "../src/backend.js";
import { ManualClock } from "./helpers.js";

const artifact = JSON.parse(
  readFileSync(new URL("../../generated/library.json", import.meta.url), "utf8"),
) as { library: string };

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function privateServer(...extra: string[]): Promise<{ url: string; stop: () => void }> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "ratelimit-node-"));
  const child: ChildProcess = spawn(
    "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, ...extra],
    { stdio: "ignore" },
  );
  const url = `redis://127.0.0.1:${port}/0`;
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  probe.on("error", () => undefined);
  for (let i = 0; ; i++) {
    try {
      await probe.connect();
      await probe.ping();
      break;
    } catch (error) {
      if (i > 100) throw error;
      await sleep(50);
    }
  }
  probe.disconnect();
  return {
    url,
    stop: () => {
      child.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The library's text at another revision, without its token_bucket function. */
function revisionWithout(revision: number): string {
  const line = "redis.register_function(PREFIX .. 'token_bucket', single_of(token_bucket, 'token_bucket'))\n";
  assert.ok(artifact.library.includes(line));
  const said = `local PROTOCOL, REVISION = '1', '${REVISION}'`;
  assert.ok(artifact.library.includes(said));
  return artifact.library.replace(line, "").replace(said, `local PROTOCOL, REVISION = '1', '${revision}'`);
}

async function calls(admin: Redis, command: string): Promise<number> {
  const info = await admin.info("commandstats");
  const found = new RegExp(`cmdstat_${command.replace("|", "\\|")}:calls=(\\d+)`).exec(info);
  return found ? Number(found[1]) : 0;
}

test("a fresh server gets the library from the first call, once", async () => {
  const server = await privateServer();
  const admin = new Redis(server.url);
  const backend = RedisBackend.fromUrl(server.url);
  try {
    const bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend, name: "fresh", clock: new ManualClock() });
    assert.deepEqual([await bucket.tryAcquire(), await bucket.tryAcquire(), await bucket.tryAcquire()], [true, true, false]);
    assert.equal(listedRevision(await admin.call("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY)), REVISION);
    assert.equal(await calls(admin, "function|load"), 1);
    assert.equal(await calls(admin, "evalsha"), 0);
  } finally {
    await backend.close();
    admin.disconnect();
    server.stop();
  }
});

test("an older revision is replaced, a newer one kept and its missing function called by script", async () => {
  const server = await privateServer();
  const admin = new Redis(server.url);
  try {
    await admin.call("FUNCTION", "LOAD", revisionWithout(REVISION - 1));
    let backend = RedisBackend.fromUrl(server.url);
    let bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend, name: "older", clock: new ManualClock() });
    assert.equal(await bucket.tryAcquire(), true);
    assert.equal(listedRevision(await admin.call("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY)), REVISION);
    await backend.close();

    await admin.call("FUNCTION", "LOAD", "REPLACE", revisionWithout(REVISION + 1));
    const loads = await calls(admin, "function|load");
    backend = RedisBackend.fromUrl(server.url);
    bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend, name: "newer", clock: new ManualClock() });
    assert.deepEqual([await bucket.tryAcquire(), await bucket.tryAcquire(), await bucket.tryAcquire()], [true, true, false]);
    // Never the older text over the newer: the newer release would load it back.
    assert.equal(listedRevision(await admin.call("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY)), REVISION + 1);
    assert.equal(await calls(admin, "function|load"), loads);
    assert.ok((await calls(admin, "evalsha")) + (await calls(admin, "eval")) >= 3);
    await backend.close();
  } finally {
    admin.disconnect();
    server.stop();
  }
});

/** The library's text at another revision, with every function. */
function revisionWhole(revision: number): string {
  const said = `local PROTOCOL, REVISION = '1', '${REVISION}'`;
  return artifact.library.replace(said, `local PROTOCOL, REVISION = '1', '${revision}'`);
}

test("an older revision holding every function is replaced at the first call", async () => {
  const server = await privateServer();
  const admin = new Redis(server.url);
  const backend = RedisBackend.fromUrl(server.url);
  try {
    // An older release loaded first: its text may lack what this revision fixed.
    await admin.call("FUNCTION", "LOAD", revisionWhole(REVISION - 1));
    const bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend, name: "whole", clock: new ManualClock() });
    assert.equal(await bucket.tryAcquire(), true);
    assert.equal(listedRevision(await admin.call("FUNCTION", "LIST", "LIBRARYNAME", LIBRARY)), REVISION);
    const loads = await calls(admin, "function|load");
    assert.equal(await bucket.tryAcquire(), true);
    assert.equal(await calls(admin, "function|list"), 2); // the first call's look, and the test's own
    assert.equal(await calls(admin, "function|load"), loads);
  } finally {
    await backend.close();
    admin.disconnect();
    server.stop();
  }
});

test("a server without FCALL (renamed away) is called by script, and decides alike", async () => {
  const server = await privateServer("--rename-command", "FCALL", "", "--rename-command", "FUNCTION", "");
  const backend = RedisBackend.fromUrl(server.url);
  try {
    const bucket = new TokenBucket({ capacity: 2, refillPerSec: 1, backend, name: "noscript", clock: new ManualClock() });
    assert.deepEqual([await bucket.tryAcquire(), await bucket.tryAcquire(), await bucket.tryAcquire()], [true, true, false]);
  } finally {
    await backend.close();
    server.stop();
  }
});
