/** The root of this package's own errors. */
export class RateLimitError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * An acquire that would have waited longer than its timeout: nothing was reserved.
 * `retryAfter` is the wait it needed, in seconds (`Infinity`: more than the limit could
 * ever grant).
 */
export class AcquireTimeout extends RateLimitError {
  readonly retryAfter: number;
  constructor(message: string, retryAfter: number) {
    super(message);
    this.retryAfter = retryAfter;
  }
}

/** The store could not be reached, or answered with an error; `cause` says which. */
export class BackendUnavailable extends RateLimitError {}
