/**
 * Token-bucket quotas as users write them (`RateLimit`, `Quota`) and as the limiters hold them:
 * parsed and checked once here for the process-local `Limiter` and the shared one.
 *
 * @module
 */
import type { LimitSpec, QuotaSpec } from './core.js';
import { describe, invalidType, outOfRange, withCode } from './errors.js';

/**
 * The answer to `Limiter.check`. When refused, nothing was taken from any bucket, and
 * `retryAfterMs` says how long until the same check would be admitted had nothing else run
 * (to the nanosecond, so it may be fractional: round up for a `Retry-After` header), or is
 * `Infinity` when waiting never helps: the cost exceeds a burst, or a bucket short of tokens
 * never refills.
 */
export type LimiterDecision = { readonly allowed: true } | { readonly allowed: false; readonly retryAfterMs: number };

/** The one admitted decision, shared. */
export const ALLOWED: LimiterDecision = Object.freeze({ allowed: true });

/** Checks a limiter allowed and refused: what keepcount/metrics exports as `decisions_total`. */
export interface Decisions {
  allowed: number;
  refused: number;
}

/**
 * The decision for a check whose buckets said to wait `waitMs` (0: admitted), counted in `tally`:
 * where the local and the shared `Limiter` turn their core's answer into a decision.
 */
export function decide(tally: Decisions, waitMs: number): LimiterDecision {
  if (waitMs === 0) {
    tally.allowed++;
    return ALLOWED;
  }
  tally.refused++;
  return { allowed: false, retryAfterMs: waitMs };
}

/** Largest period: 2^53 − 1 ns (about 104 days), so every period is a safe integer of nanoseconds. */
const MAX_PERIOD_NS = Number.MAX_SAFE_INTEGER;

/**
 * How fast one dimension refills and how much it holds: either `perSecond` tokens a second, or
 * `amount` tokens every `periodMs` milliseconds (for rates below one a second, or exact fractions).
 * Refill is continuous: one token every `periodMs / amount`.
 *
 * @example
 * ```ts
 * const apiCalls: RateLimit = { perSecond: 10, burst: 20 };
 * const slow: RateLimit = { amount: 1, periodMs: 60_000, burst: 5 }; // one a minute
 * ```
 */
export type RateLimit =
  | {
      /** Tokens added per second: a safe integer >= 0 (0 never refills). */
      perSecond: number;
      /** The most tokens held, and the largest cost ever admitted: a safe integer >= 0. */
      burst: number;
    }
  | {
      /** Tokens added every `periodMs`: a safe integer >= 0 (0 never refills). */
      amount: number;
      /** The period in milliseconds: a number > 0, rounded to the nanosecond, at most 2^53 − 1 ns (~104 days). */
      periodMs: number;
      /** The most tokens held, and the largest cost ever admitted: a safe integer >= 0. */
      burst: number;
    };

/**
 * What one bucket admits, in two dimensions at once. Each check is one request and costs its
 * `cost` in units (bytes, say); it is admitted only if every limited dimension has it.
 */
export interface Quota {
  /** The limit on requests. Defaults to none (unlimited). */
  requests?: RateLimit;
  /** The limit on cost units. Defaults to none (unlimited). */
  units?: RateLimit;
}

/** A {@link RateLimit} as the limiter holds it. */
export interface LimitInfo {
  /** Tokens added per period. */
  amount: number;
  /** The period in milliseconds (`perSecond` limits report 1000). */
  periodMs: number;
  /** The most tokens held. */
  burst: number;
}

/** A {@link Quota} as the limiter holds it: absent dimensions are unlimited. */
export interface QuotaInfo {
  requests?: LimitInfo;
  units?: LimitInfo;
}

/**
 * `The "bestEffort" option` + `requests` → `The "bestEffort.requests" option`. Called for every
 * field of every quota, errors or not (100,000 keys make 300,000 calls), so it slices instead of
 * running a regular expression, which took most of a 100,000-key table's 0.75 s.
 */
function field(what: string, name: string): string {
  const end = what.startsWith('The "') ? what.indexOf('"', 5) : -1;
  return end < 0 ? what : `${what.slice(0, end)}.${name}${what.slice(end)}`;
}

/** A checked {@link Quota}; `what` names it in errors. */
export function quotaSpec(what: string, quota: unknown): QuotaSpec {
  if (typeof quota !== 'object' || quota === null) throw invalidType(what, 'of type object', quota);
  const q = quota as Quota;
  const spec: QuotaSpec = {};
  if (q.requests !== undefined) spec.requests = limitSpec(field(what, 'requests'), q.requests);
  if (q.units !== undefined) spec.units = limitSpec(field(what, 'units'), q.units);
  return spec;
}

/**
 * A {@link RateLimit} option, checked: `what` names it in errors (keepcount/redis' `SyncedLimiter`
 * too). `nested`, if given, ends the error for an object with neither form that looks like a
 * {@link Quota} (`requests`, `units` or another object-valued property): what the caller takes
 * instead.
 */
export function limitSpec(what: string, limit: unknown, nested?: string): LimitSpec {
  if (typeof limit !== 'object' || limit === null) throw invalidType(what, 'of type object', limit);
  const l = limit as { perSecond?: unknown; amount?: unknown; periodMs?: unknown; burst?: unknown };
  const perSecond = l.perSecond !== undefined;
  const period = l.amount !== undefined || l.periodMs !== undefined;
  if (perSecond === period) {
    const expected = 'an object with either perSecond, or amount and periodMs';
    if (nested === undefined || perSecond || !looksLikeQuota(limit)) throw invalidType(what, expected, limit);
    throw withCode(
      new TypeError(`${what} must be ${expected}. Received ${describe(limit)} ${nested}`),
      'ERR_INVALID_ARG_TYPE',
    );
  }
  const burst = count(field(what, 'burst'), l.burst);
  if (perSecond) return { amount: count(field(what, 'perSecond'), l.perSecond), periodNs: 1e9, burst };
  const amount = count(field(what, 'amount'), l.amount);
  const periodWhat = field(what, 'periodMs');
  if (typeof l.periodMs !== 'number') throw invalidType(periodWhat, 'of type number', l.periodMs);
  const periodNs = Math.round(l.periodMs * 1e6);
  if (!(periodNs >= 1 && periodNs <= MAX_PERIOD_NS)) {
    throw outOfRange(periodWhat, 'a number of milliseconds of at least 1 ns and at most 2^53 - 1 ns', l.periodMs);
  }
  return { amount, periodNs, burst };
}

/** Whether `limit`, with neither form of a {@link RateLimit}, looks like a {@link Quota}. */
function looksLikeQuota(limit: object): boolean {
  const q = limit as Quota;
  if (q.requests !== undefined || q.units !== undefined) return true;
  return Object.values(limit).some((value) => typeof value === 'object' && value !== null);
}

function count(what: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidType(what, 'of type number', value);
  if (!Number.isSafeInteger(value) || value < 0) throw outOfRange(what, 'a safe integer >= 0', value);
  return value;
}

function limitInfo(limit: LimitSpec): LimitInfo {
  return { amount: limit.amount, periodMs: limit.periodNs / 1e6, burst: limit.burst };
}

/** A {@link QuotaSpec} as the limiters report it. */
export function quotaInfo(spec: QuotaSpec): QuotaInfo {
  const info: QuotaInfo = {};
  if (spec.requests != null) info.requests = limitInfo(spec.requests);
  if (spec.units != null) info.units = limitInfo(spec.units);
  return info;
}
