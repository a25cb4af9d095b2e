/**
 * Numbers as the protocol sends them (docs/protocol.md): the shortest decimal text that
 * reads back as the same double, with `.0` on a whole number and `inf` for an infinity,
 * as Python's `repr` writes them. The functions compare a few texts as sent (a guard of
 * `0.0` takes the fast path), so a client sends what Python sends.
 */
export function num(value: number): string {
  if (value === Infinity) return "inf";
  if (value === -Infinity) return "-inf";
  if (Object.is(value, -0)) return "-0.0";
  const text = String(value);
  return /[.e]/.test(text) ? text : `${text}.0`;
}

/** A reply field read as a number (`inf`, `-inf` included). */
export function fromText(text: unknown): number {
  const s = String(text);
  if (s === "inf") return Infinity;
  if (s === "-inf") return -Infinity;
  return Number(s);
}

/** A grant at once that the fast path replied alone: `"<seconds> <microseconds>"`, or
 * the time as sent. */
export function atOnce(text: string): number {
  const [seconds, micros] = text.split(" ");
  return micros === undefined ? Number(seconds) : Number(seconds) + Number(micros) / 1e6;
}
