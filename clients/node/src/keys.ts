/**
 * The key scheme (docs/protocol.md, "Keys"): every key of a limiter under one hash tag,
 * the name with `%`, `{` and `}` escaped so that it never ends its own tag.
 */
function escape(name: string): string {
  return name.replace(/%/g, "%25").replace(/\{/g, "%7B").replace(/\}/g, "%7D");
}

/** The tag of `name`, or of `name`'s budget for `key`. */
export function tag(name: string, key?: string): string {
  return key === undefined ? escape(name) : `${escape(name)}%/${escape(key)}`;
}

export interface LimiterKeys {
  base: string;
  config: string;
  code: string;
}

/** The keys of limiter `name` of algorithm `kind`; `injected`: decided on a test clock,
 * whose state is kept apart from real time's (as the Python client keeps it). */
export function keysOf(name: string, kind: string, injected = false): LimiterKeys {
  const prefix = `ratelimit:{${tag(name)}}:`;
  return {
    base: `${prefix}${injected ? "injected:" : ""}${kind}`,
    config: `${prefix}config`,
    code: `${prefix}code`,
  };
}
