/**
 * Header reading as the Python client's: protocol/feedback.json holds headers, what they
 * say and the `restrict` they ask for, checked against Python by its suite.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { parseRateLimitHeaders, restriction } from "../src/index.js";

interface Case {
  about: string;
  headers: Record<string, string>;
  status: number | null;
  info: Record<string, number>;
  restriction: [number, number] | null;
}

const document = JSON.parse(
  readFileSync(new URL("../../../../protocol/feedback.json", import.meta.url), "utf8"),
) as { now: number; cases: Case[] };

const PYTHON_NAMES: Record<string, string> = { resetAfter: "reset_after", retryAfter: "retry_after" };

for (const c of document.cases) {
  test(`headers: ${c.about}`, () => {
    const info = parseRateLimitHeaders(c.headers, { now: document.now });
    const read: Record<string, number> = {};
    for (const key of ["limit", "remaining", "resetAfter", "retryAfter", "window"] as const) {
      if (info[key] !== undefined) read[PYTHON_NAMES[key] ?? key] = info[key]!;
    }
    assert.deepEqual(read, c.info);
    assert.deepEqual(restriction(info, c.status ?? undefined) ?? null, c.restriction);
  });
}

test("headers come as a Map, fetch's Headers, or pairs, any case", () => {
  const expected = { retryAfter: 5 };
  assert.deepEqual(parseRateLimitHeaders(new Map([["retry-after", "5"]])), expected);
  assert.deepEqual(parseRateLimitHeaders(new Headers({ "Retry-After": "5" })), expected);
  assert.deepEqual(parseRateLimitHeaders([["RETRY-AFTER", "5"]]), expected);
  assert.deepEqual(parseRateLimitHeaders(null), {});
  assert.throws(() => parseRateLimitHeaders({}, { cap: 0 }), /cap must be/);
});

test("OpenAI's token budget is read apart from its requests", () => {
  const info = parseRateLimitHeaders({
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-tokens": "149984",
    "x-ratelimit-reset-tokens": "6m0s",
  });
  assert.deepEqual(info.tokens, { limit: 150000, remaining: 149984, resetAfter: 360, gradual: true });
});
