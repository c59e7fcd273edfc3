/**
 * The RateLimit header fields of draft-ietf-httpapi-ratelimit-headers-09 (March 2025), the
 * Structured Fields form that replaced the `RateLimit-Limit`/`-Remaining`/`-Reset` trio of drafts
 * -07 and earlier:
 *
 * ```http
 * RateLimit-Policy: "default";q=100;w=60
 * RateLimit: "default";r=42;t=30
 * ```
 *
 * `q` is the quota, `w` the window in seconds, `r` the remaining quota and `t` the seconds until
 * the quota resets. No partition key (`pk`) is sent: it would only tell the client its own key.
 * Refusals add `Retry-After` (RFC 9110 §10.2.3) in delay-seconds.
 *
 * @module
 */
import { invalidType } from '../errors.js';

/** What a quota check decided, as the headers and a refusal handler need it. */
export interface RateLimitDecision {
  /** True when the request is within the quota. */
  allowed: boolean;
  /** The policy name, sent as the header's item (`"default"`). */
  policy: string;
  /** The quota per window (`q`). */
  limit: number;
  /** The key's estimated count in this window, this request included. */
  count: number;
  /** Quota left in this window (`r`), never negative. */
  remaining: number;
  /** Milliseconds until the quota resets (`t`, rounded up to seconds). */
  resetMs: number;
  /** The window in milliseconds (`w`, rounded up to seconds). */
  windowMs: number;
  /** The key the request was counted under. */
  key: string;
}

/** What a refused token-bucket request gets: the key and how long to wait. */
export interface TokenBucketRefusal {
  /** The key the request was checked under. */
  key: string;
  /** Milliseconds until the same request would be admitted, or `Infinity` when never. */
  retryAfterMs: number;
}

/** Names a policy: printable ASCII, as an sf-string allows. @internal */
export function policyName(value: unknown): string {
  if (typeof value !== 'string' || !/^[\x20-\x7e]*$/.test(value)) {
    throw invalidType('The "policy" option', 'a string of printable ASCII', value);
  }
  return value;
}

/** `value` as an sf-string (RFC 9651 §3.3.3). */
const sfString = (value: string): string => `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

const seconds = (ms: number): number => Math.ceil(ms / 1000);

/**
 * The header fields for `decision`: `RateLimit-Policy` and `RateLimit` always, `Retry-After` when
 * it refuses.
 *
 * @example
 * ```ts
 * for (const [name, value] of Object.entries(rateLimitHeaders(decision))) res.setHeader(name, value);
 * ```
 */
export function rateLimitHeaders(decision: RateLimitDecision): Record<string, string> {
  const name = sfString(decision.policy);
  const headers: Record<string, string> = {
    'RateLimit-Policy': `${name};q=${decision.limit};w=${seconds(decision.windowMs)}`,
    RateLimit: `${name};r=${decision.remaining};t=${seconds(decision.resetMs)}`,
  };
  if (!decision.allowed) headers['Retry-After'] = String(Math.max(1, seconds(decision.resetMs)));
  return headers;
}

/** `Retry-After` for a token-bucket refusal, or `undefined` when waiting never helps. */
export function retryAfter(retryAfterMs: number): string | undefined {
  return Number.isFinite(retryAfterMs) ? String(Math.max(1, seconds(retryAfterMs))) : undefined;
}
