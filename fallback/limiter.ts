/**
 * The token-bucket limiter of `crates/limits/src/limiter.rs`, single-threaded, with the same
 * integer arithmetic (its module docs, "Arithmetic"), so that every decision and every retry time
 * is the native one to the nanosecond.
 *
 * Tokens are counted in units (one token = `periodNs` units, refilled at `amount` units per
 * nanosecond). A full bucket is `burst × periodNs` units: up to 2^106 with the API's safe-integer
 * inputs, and clock readings are u64 nanoseconds, so counts and times are `bigint`s. Inputs stay
 * `number`s (safe integers, as `lib/` validated them) and are converted once per quota.
 */
import { PACKED_QUOTA, unpackQuota, type Key, type LimiterCore, type LimitSpec, type QuotaSpec } from '../lib/core.js';
import { Stopwatch } from '../lib/clock.js';
import { canonical, type CanonicalKey } from './canonical.js';

const U64_MAX = 2n ** 64n - 1n;
/** 2^64 as a double: `as u64` in Rust saturates every double at or above it. */
const TWO_64 = 2 ** 64;

/** One dimension of a quota in bigint form. */
interface Dim {
  amount: bigint;
  period: bigint;
  burst: bigint;
  /** `burst × period`: a full bucket in units. */
  capacity: bigint;
}

/** A validated quota with its dimensions converted once. */
interface Governing {
  spec: QuotaSpec;
  dims: [Dim | null, Dim | null];
}

/** A bucket: held units per dimension (requests, units) and the reading of the last refill. */
interface State {
  tokens: [bigint, bigint];
  last: bigint;
}

interface Bucket {
  quota: Governing;
  state: State;
}

/** Nanoseconds as Rust's `(now_ms * 1e6) as u64` computes them: truncated, saturating. */
export function nanosFromMs(nowMs: number): bigint {
  const ns = nowMs * 1e6;
  if (!(ns > 0)) return 0n;
  return ns >= TWO_64 ? U64_MAX : BigInt(Math.trunc(ns));
}

function dim(limit: LimitSpec | undefined): Dim | null {
  if (limit === undefined) return null;
  const amount = BigInt(limit.amount);
  const period = BigInt(limit.periodNs);
  const burst = BigInt(limit.burst);
  return { amount, period, burst, capacity: burst * period };
}

function govern(spec: QuotaSpec): Governing {
  return { spec, dims: [dim(spec.requests), dim(spec.units)] };
}

const UNLIMITED: Governing = govern({});

function limitsEqual(a: Dim | null, b: Dim | null): boolean {
  if (a === null || b === null) return a === b;
  return a.amount === b.amount && a.period === b.period && a.burst === b.burst;
}

function quotasEqual(a: Governing, b: Governing): boolean {
  return limitsEqual(a.dims[0], b.dims[0]) && limitsEqual(a.dims[1], b.dims[1]);
}

function full(quota: Governing, now: bigint): State {
  return { tokens: [quota.dims[0]?.capacity ?? 0n, quota.dims[1]?.capacity ?? 0n], last: now };
}

/** `State::refill`: adds `amount × (now − last)` per limited dimension, capped; a stale `now` adds nothing. */
function refill(state: State, quota: Governing, now: bigint): void {
  if (now <= state.last) return;
  const elapsed = now - state.last;
  state.last = now;
  for (let i = 0; i < 2; i++) {
    const d = quota.dims[i as 0 | 1];
    if (d === null) continue;
    const t = state.tokens[i as 0 | 1] + d.amount * elapsed;
    state.tokens[i as 0 | 1] = t < d.capacity ? t : d.capacity;
  }
}

/** `Wait`: nanoseconds, or -1n for never (above every number). */
const NEVER = -1n;

function maxWait(a: bigint, b: bigint): bigint {
  if (a === NEVER || b === NEVER) return NEVER;
  return a > b ? a : b;
}

/** `dimension_wait`. */
function dimensionWait(tokens: bigint, d: Dim, cost: bigint): bigint {
  if (cost > d.burst) return NEVER;
  const need = cost * d.period;
  if (need <= tokens) return 0n;
  if (d.amount === 0n) return NEVER;
  const nanos = (need - tokens + d.amount - 1n) / d.amount;
  return nanos > U64_MAX ? U64_MAX : nanos;
}

function wait(state: State, quota: Governing, costs: [bigint, bigint]): bigint {
  let w = 0n;
  for (let i = 0; i < 2; i++) {
    const d = quota.dims[i as 0 | 1];
    if (d !== null) w = maxWait(w, dimensionWait(state.tokens[i as 0 | 1], d, costs[i as 0 | 1]));
  }
  return w;
}

function take(state: State, quota: Governing, costs: [bigint, bigint]): void {
  for (let i = 0; i < 2; i++) {
    const d = quota.dims[i as 0 | 1];
    if (d === null) continue;
    const t = state.tokens[i as 0 | 1] - costs[i as 0 | 1] * d.period;
    state.tokens[i as 0 | 1] = t > 0n ? t : 0n;
  }
}

/** `State::set_quota`: refill at the old quota, then convert (round down) and cap per dimension. */
function setQuota(bucket: Bucket, quota: Governing, now: bigint): void {
  const { state } = bucket;
  refill(state, bucket.quota, now);
  for (let i = 0; i < 2; i++) {
    const before = bucket.quota.dims[i as 0 | 1];
    const after = quota.dims[i as 0 | 1];
    let t = 0n;
    if (after !== null) {
      if (before === null) {
        t = after.capacity;
      } else {
        // ⌊tokens × new / old⌋, which Rust computes as whole tokens and remainder apart.
        const converted = (state.tokens[i as 0 | 1] * after.period) / before.period;
        t = converted < after.capacity ? converted : after.capacity;
      }
    }
    state.tokens[i as 0 | 1] = t;
  }
  bucket.quota = quota;
}

/** The fallback {@link LimiterCore}. Arguments arrive validated by `lib/`; time starts at 0. */
export class FallbackLimiter implements LimiterCore {
  private keys = new Map<CanonicalKey, Bucket>();
  private readonly bestEffort: Bucket;
  private readonly overall: Bucket;
  private overallLimited = false;

  /**
   * With a host clock (`hostClock` of `LimiterCoreConstructor`): reads the host's monotonic clock
   * in place of the `nowMs` callers pass, as the native core does.
   */
  private readonly host: Stopwatch | undefined;

  constructor(bestEffort: QuotaSpec, hostClock = false) {
    this.host = hostClock ? new Stopwatch(undefined) : undefined;
    const quota = govern(bestEffort);
    this.bestEffort = { quota, state: full(quota, 0n) };
    this.overall = { quota: UNLIMITED, state: full(UNLIMITED, 0n) };
  }

  get size(): number {
    return this.keys.size;
  }

  /** Lets go of the key table (lib/ calls nothing after). */
  close(): void {
    this.keys = new Map();
  }

  check(key: Key, cost: number, nowMs: number): number {
    const now = this.nanos(nowMs);
    const own = this.keys.get(canonical(key)) ?? this.bestEffort;
    const costs: [bigint, bigint] = [1n, BigInt(cost)];
    refill(own.state, own.quota, now);
    let w = wait(own.state, own.quota, costs);
    const overall = this.overallLimited ? this.overall : null;
    if (overall !== null) {
      refill(overall.state, overall.quota, now);
      w = maxWait(w, wait(overall.state, overall.quota, costs));
    }
    if (w === 0n) {
      take(own.state, own.quota, costs);
      if (overall !== null) take(overall.state, overall.quota, costs);
      return 0;
    }
    return w === NEVER ? Infinity : Number(w) / 1e6;
  }

  replaceKeys(keys: Key[], quotas: Float64Array, nowMs: number): boolean {
    const now = this.nanos(nowMs);
    const next = new Map<CanonicalKey, Bucket>();
    const kept: [Bucket, Governing][] = [];
    // One `Governing` per distinct quota, shared by its buckets (it is never changed, only
    // replaced): a table of a million keys on a few plans held a million copies of the same few
    // bigints, 590 MB of heap where the native table takes 205 MB.
    const distinct = new Map<string, Governing>();
    for (let i = 0; i < keys.length; i++) {
      const k = canonical(keys[i]!);
      if (next.has(k)) return false;
      const packed = quotas.subarray(i * PACKED_QUOTA, (i + 1) * PACKED_QUOTA).join();
      let quota = distinct.get(packed);
      if (quota === undefined) {
        quota = govern(unpackQuota(quotas, i));
        distinct.set(packed, quota);
      }
      const stays = this.keys.get(k);
      if (stays === undefined) {
        next.set(k, { quota, state: full(quota, now) });
      } else {
        kept.push([stays, quota]);
        next.set(k, stays);
      }
    }
    for (const [bucket, quota] of kept) {
      if (!quotasEqual(bucket.quota, quota)) setQuota(bucket, quota, now);
    }
    this.keys = next;
    return true;
  }

  setQuota(key: Key, quota: QuotaSpec, nowMs: number): boolean {
    const bucket = this.keys.get(canonical(key));
    if (bucket === undefined) return false;
    const governing = govern(quota);
    // As native: an unchanged quota is not even refilled (which a stale reading would notice).
    if (!quotasEqual(bucket.quota, governing)) setQuota(bucket, governing, this.nanos(nowMs));
    return true;
  }

  setBestEffort(quota: QuotaSpec, nowMs: number): void {
    setQuota(this.bestEffort, govern(quota), this.nanos(nowMs));
  }

  setOverall(quota: QuotaSpec | null, nowMs: number): void {
    const governing = quota === null ? UNLIMITED : govern(quota);
    setQuota(this.overall, governing, this.nanos(nowMs));
    this.overallLimited = governing.dims[0] !== null || governing.dims[1] !== null;
  }

  quota(key: Key): QuotaSpec | null {
    return this.keys.get(canonical(key))?.quota.spec ?? null;
  }

  /** The time of a call in nanoseconds: the host clock's reading, or the caller's `nowMs`. */
  private nanos(nowMs: number): bigint {
    return nanosFromMs(this.host === undefined ? nowMs : this.host.elapsedMs());
  }
}
