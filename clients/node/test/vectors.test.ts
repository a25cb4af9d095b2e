/**
 * The protocol's conformance vectors (protocol/vectors.json), as the Python suite runs
 * them: each scenario on fresh keys, each step's reply matched (a list by its first
 * items: a later revision may add fields at the end).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";

import { PROTOCOL } from "../src/index.js";
import { backend, forget, uniqueName } from "./helpers.js";

interface Step {
  fcall?: string;
  keys?: string[];
  args?: string[];
  command?: string[];
  reply: unknown;
  note?: string;
}

const vectors = JSON.parse(
  readFileSync(new URL("../../../../protocol/vectors.json", import.meta.url), "utf8"),
) as { protocol: number; scenarios: { name: string; steps: Step[] }[] };

function conforms(expected: unknown, got: unknown): boolean {
  if (Array.isArray(expected)) {
    return Array.isArray(got) && got.length >= expected.length && expected.every((e, i) => conforms(e, got[i]));
  }
  if (expected !== null && typeof expected === "object" && "error" in expected) {
    return got instanceof Error && got.message.includes(String((expected as { error: string }).error));
  }
  return expected === got;
}

const b = backend();
after(() => b.close());

test("the vectors are of the protocol this client speaks", () => {
  assert.equal(vectors.protocol, PROTOCOL);
});

for (const scenario of vectors.scenarios) {
  test(`vectors: ${scenario.name}`, async () => {
    const name = uniqueName("vectors");
    const named = (text: string): string => text.replaceAll("$NAME", name);
    try {
      for (const [i, step] of scenario.steps.entries()) {
        let got: unknown;
        try {
          got = step.fcall
            ? await b.call(step.fcall, step.keys!.map(named), step.args!.map(named))
            : await b.client.call(...(step.command!.map(named) as [string, ...string[]]));
        } catch (error) {
          got = error;
        }
        assert.ok(conforms(step.reply, got), `step ${i} (${step.note ?? ""}): ${JSON.stringify(got)}`);
      }
    } finally {
      await forget(b, name);
    }
  });
}
