export { RedisBackend, type BackendOptions, LIBRARY, PROTOCOL, REVISION } from "./backend.js";
export { AcquireTimeout, BackendUnavailable, RateLimitError } from "./errors.js";
export { type HeaderSource, type RateLimitInfo, parseRateLimitHeaders, restriction } from "./headers.js";
export {
  type AcquireOptions,
  type Clock,
  LeakyBucket,
  type LeakyBucketOptions,
  Limiter,
  Reservation,
  SlidingWindow,
  type SlidingWindowOptions,
  TokenBucket,
  type TokenBucketOptions,
} from "./limiters.js";
