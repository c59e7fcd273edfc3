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
import { invalidType, outOfRange } from '../errors.js';

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

/** What an sf-string may hold (RFC 9651 §3.3.3): printable ASCII. */
const PRINTABLE_ASCII = /^[\x20-\x7e]*$/;

/** Names a policy: printable ASCII, as an sf-string allows. @internal */
export function policyName(value: unknown): string {
  if (typeof value !== 'string' || !PRINTABLE_ASCII.test(value)) {
    throw invalidType('The "policy" option', 'a string of printable ASCII', value);
  }
  return value;
}

/** `value` as an sf-string (RFC 9651 §3.3.3). */
const sfString = (value: string): string => `"${value.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

const seconds = (ms: number): number => Math.ceil(ms / 1000);

/**
 * The largest sf-integer: RFC 9651 §3.3.1 allows at most 15 digits, and a parser rejects the whole
 * field over an integer with more. A quota or remaining count above it (a `limit` of
 * `Number.MAX_SAFE_INTEGER` for "no limit", say) is sent as this: no client can tell 10^15
 * requests from more. Seconds never reach it (a window is at most 2^52 ms, 4.5 × 10^12 s).
 */
const SF_INTEGER_MAX = 999_999_999_999_999;

/** The longest window a `WindowQuota` takes, 2^52 ms: a decision's `windowMs` and `resetMs` are at most this. */
const MAX_WINDOW_MS = 2 ** 52;

const sfInteger = (n: number): number => Math.min(n, SF_INTEGER_MAX);

/**
 * The last `RateLimit-Policy` value made, and what it was made from: a quota's policy, limit and
 * window never change, so on the request path this is one comparison instead of an escape and a
 * string concatenation per request.
 */
let policyMemo = { policy: '', limit: -1, windowMs: -1, name: '""', value: '' };

/**
 * The `RateLimit-Policy` field value for a `decision` {@link checkDecision} passed: that check
 * trusts the policy remembered here, so an unchecked one would let it pass a bad policy later.
 * @internal
 */
export function policyField(decision: RateLimitDecision): string {
  const memo = policyMemo;
  if (decision.policy === memo.policy && decision.limit === memo.limit && decision.windowMs === memo.windowMs) {
    return memo.value;
  }
  const { policy, limit, windowMs } = decision;
  const name = sfString(policy);
  policyMemo = { policy, limit, windowMs, name, value: `${name};q=${sfInteger(limit)};w=${seconds(windowMs)}` };
  return policyMemo.value;
}

/** Slots of {@link rateLimitField}'s cache: a power of two. */
const FIELD_SLOTS = 64;

/**
 * `RateLimit` values made lately, one per slot, the slot chosen by the remaining count: most
 * requests share their value with an earlier one (every client's first request in a second of the
 * window reads the same `r` and `t`; under a flood of new clients, colliding estimates spread them
 * over a few neighbouring counts, which land in neighbouring slots). Making the string costs a
 * loaded server more than its length suggests, ~1.5 µs a request with the caches cold
 * (benchmark/README.md), where a hit is four comparisons and no garbage.
 */
const fieldNames: string[] = new Array<string>(FIELD_SLOTS).fill('');
const fieldRemaining = new Float64Array(FIELD_SLOTS).fill(-1);
const fieldSeconds = new Float64Array(FIELD_SLOTS).fill(-1);
const fieldValues: string[] = new Array<string>(FIELD_SLOTS).fill('');

/** The `RateLimit` field value for `decision` (after {@link policyField}, whose name it reuses). @internal */
export function rateLimitField(decision: RateLimitDecision): string {
  const name = decision.policy === policyMemo.policy ? policyMemo.name : sfString(decision.policy);
  const remaining = sfInteger(decision.remaining);
  const t = seconds(decision.resetMs);
  // `%` first: `&` alone would cut a count past 2^31 to 32 bits. `>>> 0` then makes any number a
  // valid slot (a quota of the user's may hand the middleware a fraction or a negative count).
  const slot = ((remaining % FIELD_SLOTS) >>> 0) & (FIELD_SLOTS - 1);
  if (fieldRemaining[slot] === remaining && fieldSeconds[slot] === t && fieldNames[slot] === name) {
    return fieldValues[slot]!;
  }
  const value = `${name};r=${remaining};t=${t}`;
  fieldNames[slot] = name;
  fieldRemaining[slot] = remaining;
  fieldSeconds[slot] = t;
  fieldValues[slot] = value;
  return value;
}

/**
 * The `Retry-After` field value for a refused `decision`. Its `resetMs` is checked here too: with
 * headers off nothing else reads the decision, and a quota's `NaN` was sent as `Retry-After: NaN`.
 * @internal
 */
export function retryAfterField(decision: RateLimitDecision): string {
  const { resetMs } = decision;
  if (!isWindowMs(resetMs)) {
    throw numberError('The "decision.resetMs" argument', `a number of milliseconds in [0, ${MAX_WINDOW_MS}]`, resetMs);
  }
  return String(Math.max(1, seconds(resetMs)));
}

/**
 * The header fields for `decision`: `RateLimit-Policy` and `RateLimit` always, `Retry-After` when
 * it refuses. Of the decision it reads `allowed` (a boolean), `policy` (a string of printable
 * ASCII), `limit` and `remaining` (integers >= 0) and `resetMs` and `windowMs` (milliseconds in
 * [0, 2^52]); a field of another type throws `TypeError` `ERR_INVALID_ARG_TYPE`, a number out of
 * its range `RangeError` `ERR_OUT_OF_RANGE`.
 *
 * @example
 * ```ts
 * for (const [name, value] of Object.entries(rateLimitHeaders(decision))) res.setHeader(name, value);
 * ```
 */
export function rateLimitHeaders(decision: RateLimitDecision): Record<string, string> {
  checkDecision(decision);
  const headers: Record<string, string> = {
    'RateLimit-Policy': policyField(decision),
    RateLimit: rateLimitField(decision),
  };
  if (!decision.allowed) headers['Retry-After'] = retryAfterField(decision);
  return headers;
}

/**
 * Throws unless `decision` has every field {@link rateLimitHeaders} reads, of its type and range.
 * The middleware and Fastify's hook call it per request (a custom `quota` may answer anything),
 * so the fields are tested in one condition and the error worked out only when one fails. The
 * policy's text is tested only when it is not the one {@link policyField} remembers, which it
 * checked. @internal
 */
export function checkDecision(decision: RateLimitDecision): void {
  if (
    typeof decision !== 'object' ||
    decision === null ||
    typeof decision.allowed !== 'boolean' ||
    typeof decision.policy !== 'string' ||
    (decision.policy !== policyMemo.policy && !PRINTABLE_ASCII.test(decision.policy)) ||
    !isCount(decision.limit) ||
    !isCount(decision.remaining) ||
    !isWindowMs(decision.resetMs) ||
    !isWindowMs(decision.windowMs)
  ) {
    throw decisionError(decision);
  }
}

/** A decision's `limit` or `remaining`: an integer >= 0 (sent as at most 10^15 − 1). */
const isCount = (value: unknown): boolean => Number.isInteger(value) && (value as number) >= 0;

/** A decision's `resetMs` or `windowMs`. */
const isWindowMs = (value: unknown): boolean => typeof value === 'number' && value >= 0 && value <= MAX_WINDOW_MS;

/** The error for the first field of `decision` that {@link checkDecision} refuses. */
function decisionError(decision: unknown): TypeError | RangeError {
  if (typeof decision !== 'object' || decision === null) {
    return invalidType('The "decision" argument', 'of type object', decision);
  }
  const d = decision as Record<keyof RateLimitDecision, unknown>;
  const what = (name: keyof RateLimitDecision): string => `The "decision.${name}" argument`;
  if (typeof d.allowed !== 'boolean') return invalidType(what('allowed'), 'of type boolean', d.allowed);
  if (typeof d.policy !== 'string' || !PRINTABLE_ASCII.test(d.policy)) {
    return invalidType(what('policy'), 'a string of printable ASCII', d.policy);
  }
  if (!isCount(d.limit)) return numberError(what('limit'), 'an integer >= 0', d.limit);
  if (!isCount(d.remaining)) return numberError(what('remaining'), 'an integer >= 0', d.remaining);
  const milliseconds = `a number of milliseconds in [0, ${MAX_WINDOW_MS}]`;
  if (!isWindowMs(d.resetMs)) return numberError(what('resetMs'), milliseconds, d.resetMs);
  return numberError(what('windowMs'), milliseconds, d.windowMs);
}

/** `TypeError` for a value that is not a number, else `RangeError`: it is not `expected`. */
function numberError(what: string, expected: string, value: unknown): TypeError | RangeError {
  return typeof value === 'number' ? outOfRange(what, expected, value) : invalidType(what, 'of type number', value);
}

/**
 * The longest `Retry-After` sent, in seconds: the longest wait a `Limiter` reports, 2^64 ns (its
 * clock's range), rounded up. A `SyncedLimiter` with a vast burst refilling slowly reports longer
 * ones, and past 10^21 s `String()` wrote them as `4.8e+21`, which is no delay-seconds value.
 */
const MAX_RETRY_AFTER_S = 18_446_744_074;

/** `Retry-After` for a token-bucket refusal, or `undefined` when waiting never helps. */
export function retryAfter(retryAfterMs: number): string | undefined {
  if (!Number.isFinite(retryAfterMs)) return undefined;
  return String(Math.min(MAX_RETRY_AFTER_S, Math.max(1, seconds(retryAfterMs))));
}
