/**
 * The seam between the public API and the two implementations of it: the types both backends
 * implement, and nothing else, so `fallback/`, the native adapter (`lib/native.cts`) and the loader
 * (`lib/backend.ts`) all import from here and nothing imports upward (`npm run lint` checks for
 * import cycles, type-only imports included).
 *
 * `lib/` validates every argument once and then calls a {@link Backend}: the Rust core through the
 * native adapter, mapping the napi-generated `binding.js`, or the pure-TypeScript `fallback/`.
 * Backend methods therefore take only already-validated values and never throw for bad input;
 * anything they report (a corrupt sketch) comes back as a value `lib/` turns into the one error
 * message both backends share.
 *
 * @module
 */

/**
 * A key: a `string` (hashed as UTF-8, lone surrogates as U+FFFD), a `number` that is a safe
 * integer or a `bigint` in the i64 range (both hashed as i64, so `1` and `1n` are the same key), or
 * a `Uint8Array` (Buffer included; hashed as length-prefixed bytes, so it differs from the string
 * with the same content). See docs/format.md §1. Backends receive only keys `lib/keys.ts` validated.
 */
export type Key = string | number | bigint | Uint8Array;

/** The name of a backend. */
export type BackendName = 'native' | 'fallback';

/**
 * A count-min sketch (docs/format.md §3). Counts are numbers, exact within ±2^53; `value`s are
 * safe integers, possibly negative.
 */
export interface EstimatorCore {
  readonly hashes: number;
  readonly slots: number;
  /** In [0, 2^64). */
  readonly seed: bigint;
  /** Adds `value` to `key`'s counters; returns its new estimate. */
  incr(key: Key, value: number): number;
  /** `key`'s estimate. */
  get(key: Key): number;
  /** The row-major positions of `key`'s counters, one per row (docs/format.md §3). */
  counterIndexes(key: Key): number[];
  /** Zeroes every counter. */
  reset(): void;
  /** Adds `other`'s counters to this one's; `lib/` has checked hashes, slots and seed are equal. */
  merge(other: EstimatorCore): void;
  /** The version-3 serialized form (docs/format.md §5). */
  serialize(): Uint8Array;
  /** Frees the counters now; `lib/` never calls the core again. */
  close(): void;
}

/** Creates an empty sketch; the shape is within docs/format.md §4 and `seed` in [0, 2^64). */
export type EstimatorCoreConstructor = new (hashes: number, slots: number, seed: bigint) => EstimatorCore;

/**
 * The first check of docs/format.md §5 a serialized sketch fails, in the spec's order: length < 28,
 * magic, version, flags, shape, exact total length, checksum.
 */
export type CorruptReason = 'short' | 'magic' | 'version' | 'flags' | 'shape' | 'length' | 'checksum';

/** What `Rate.rateWith` needs from the core; `lib/` adds the interval. */
export interface RateSample {
  prevSamples: number;
  currSamples: number;
  currentIntervalFraction: number;
}

/**
 * pingora-limits' `Rate` on a time base the caller supplies: `nowMs` is whole milliseconds
 * elapsed since the core was created, never decreasing (`lib/` reads the user's clock and clamps).
 * A core made with `hostClock` reads that itself instead, on the host's monotonic clock (see
 * {@link RateCoreConstructor}), and ignores every `nowMs`. Each call first rolls the intervals
 * over as pingora's `maybe_reset` does.
 */
export interface RateCore {
  /** Adds `events` to `key` in the current interval; returns its count there. */
  observe(key: Key, events: number, nowMs: number): number;
  /**
   * {@link observe}, also writing to `window[0]` the ms `nowMs` is into the current interval
   * after any roll-over (so in [0, intervalMs)): a fixed-window quota gets its count and the time
   * to the window's end from one call.
   */
  observeInWindow(key: Key, events: number, nowMs: number, window: Float64Array): number;
  /**
   * Takes back up to `events` (a safe integer >= 0) of `key`'s count in the current interval:
   * each of its counters drops by `events` but stops at zero (one at or below zero is left as it
   * is), with a compare-and-swap where threads or processes share the counters; returns `key`'s
   * count there (0, taking nothing, while a shared rate's rotation runs).
   */
  refund(key: Key, events: number, nowMs: number): number;
  /** `key`'s count in the previous interval, 0 if two or more intervals passed without a reset. */
  previousCount(key: Key, nowMs: number): number;
  /** pingora's `rate_with` components for `key`. */
  sample(key: Key, nowMs: number): RateSample;
  /** Frees both sketches now; `lib/` never calls the core again. */
  close(): void;
}

/**
 * `intervalMs` is an integer in [1, 2^52]; the shape is within §4; `seed` in [0, 2^64). With
 * `hostClock` the core keeps time itself: whole milliseconds since it was made on the host's
 * monotonic clock (`CLOCK_MONOTONIC`, `process.hrtime()`'s), read in each call, as `lib/`'s
 * `Stopwatch` counts them on its default clock. For `lib/`'s objects made without a `clock`: the
 * native core then reads the time inside the call it makes anyway, instead of JavaScript making
 * a call of its own for it. With `wallOriginMs` (a caller clock on `Date.now()`, `lib/clock.ts`
 * `dateClock`) every `nowMs` is a wall reading, whole milliseconds from `wallOriginMs` to a
 * `Date.now()` reading within ±(2^53 − 1) (`wallReadingMs`), or `READ_WALL_CLOCK` (NaN) for "read
 * it yourself": the wall clock's present reading. The core's time is then the readings' forward
 * steps (`ForwardTime`): a reading below the last counts as no time passing.
 */
export type RateCoreConstructor = new (
  intervalMs: number,
  hashes: number,
  slots: number,
  seed: bigint,
  hostClock: boolean,
  wallOriginMs?: number,
) => RateCore;

/** One dimension of a quota: `amount` tokens every `periodNs` ns, at most `burst` held (safe integers, periodNs >= 1). */
export interface LimitSpec {
  amount: number;
  periodNs: number;
  burst: number;
}

/** A quota as backends take it: a limit on requests and one on cost units; an absent one is unlimited. */
export interface QuotaSpec {
  requests?: LimitSpec;
  units?: LimitSpec;
}

/**
 * Numbers per quota in a packed key table: requests' amount, period in ns and burst, then units'
 * (a period of 0: no limit on that dimension). A table of 100,000 keys crosses into the native
 * backend as one `Float64Array` instead of 100,000 nested objects, whose property reads took
 * most of the call's 220 ms.
 */
export const PACKED_QUOTA = 6;

/** `quotas` packed for {@link LimiterCore.replaceKeys}. */
export function packQuotas(quotas: readonly QuotaSpec[]): Float64Array {
  const packed = new Float64Array(quotas.length * PACKED_QUOTA);
  for (let i = 0; i < quotas.length; i++) {
    packLimit(packed, i * PACKED_QUOTA, quotas[i]!.requests);
    packLimit(packed, i * PACKED_QUOTA + 3, quotas[i]!.units);
  }
  return packed;
}

function packLimit(packed: Float64Array, at: number, limit: LimitSpec | undefined): void {
  if (limit === undefined) return;
  packed[at] = limit.amount;
  packed[at + 1] = limit.periodNs;
  packed[at + 2] = limit.burst;
}

/** Quota `i` of a table packed by {@link packQuotas}. */
export function unpackQuota(packed: Float64Array, i: number): QuotaSpec {
  const quota: QuotaSpec = {};
  const requests = unpackLimit(packed, i * PACKED_QUOTA);
  const units = unpackLimit(packed, i * PACKED_QUOTA + 3);
  if (requests !== undefined) quota.requests = requests;
  if (units !== undefined) quota.units = units;
  return quota;
}

function unpackLimit(packed: Float64Array, at: number): LimitSpec | undefined {
  return packed[at + 1] === 0 ? undefined : { amount: packed[at]!, periodNs: packed[at + 1]!, burst: packed[at + 2]! };
}

/**
 * The token-bucket limiter of `crates/limits/src/limiter.rs` on a time base the caller supplies:
 * `nowMs` is milliseconds since the core was created (finite, >= 0, fractions allowed), taken as
 * `trunc(nowMs × 1e6)` nanoseconds saturating at 2^64 − 1, identically in both backends. A core
 * made with `hostClock` reads nanoseconds since it was made on the host's monotonic clock itself
 * and ignores every `nowMs` (see {@link RateCoreConstructor}).
 */
export interface LimiterCore {
  /** 0 if admitted (and taken); else the ms until it would be (`wait_ns / 1e6`), `Infinity` if never. */
  check(key: Key, cost: number, nowMs: number): number;
  /**
   * Replaces the key table, `keys[i]` under the quota packed at `quotas[6i..6i+6]`
   * ({@link packQuotas}); `false` (nothing changed) if two keys are the same key.
   */
  replaceKeys(keys: Key[], quotas: Float64Array, nowMs: number): boolean;
  /** `false` if `key` is not in the table. */
  setQuota(key: Key, quota: QuotaSpec, nowMs: number): boolean;
  setBestEffort(quota: QuotaSpec, nowMs: number): void;
  /** `null` removes the overall quota. */
  setOverall(quota: QuotaSpec | null, nowMs: number): void;
  /** `key`'s quota, `null` if it is not in the table. */
  quota(key: Key): QuotaSpec | null;
  readonly size: number;
  /** Frees the key table and the buckets now; nothing is called after. */
  close(): void;
}

/** Creates a limiter with no keys and `bestEffort` for every key, full at time 0. */
export type LimiterCoreConstructor = new (bestEffort: QuotaSpec, hostClock: boolean) => LimiterCore;

/** Keeps the process alive (like a ref'd `setTimeout`) or not, for one armed tick, or cancels it. */
export interface TickHandle {
  ref(): void;
  unref(): void;
  /**
   * The tick will not fire, and holds nothing of the backend's any more (its timer, its
   * registration); `ref`/`unref` do nothing after. Called before the deadline; arming the same
   * deadline again later arms a new tick.
   */
  cancel(): void;
}

/**
 * The time source behind `timeout`/`sleep`/`timeoutSignal`. `lib/timeout.ts` keeps the waiters in
 * JavaScript, one bucket per 10 ms deadline, and asks the ticker to fire each bucket once.
 */
export interface Ticker {
  /** Monotonic milliseconds (may be fractional); deadlines are on this time base. */
  now(): number;
  /**
   * Calls `fire` once, on the JavaScript thread, no earlier than `now() >= deadlineMs`. Called once
   * per distinct deadline. The returned handle starts ref'd.
   */
  arm(deadlineMs: number, fire: () => void): TickHandle;
  /** pingora-timeout's `pause_for_fork`: stop the clock machinery before `fork()`. */
  pauseForFork(): void;
  /** pingora-timeout's `unpause`, after `fork()`. */
  unpause(): void;
}

/**
 * Which interval of a heavy-hitter core a query reads: 0 the current one, 1 the previous one, 2
 * both added (crates/limits/src/heavy/window.rs `Window`).
 */
export type HeavyWindow = 0 | 1 | 2;

/**
 * What a key's heavy-hitter bounds are made of (crates/limits/src/heavy/count.rs `Standing`):
 * 0 tracked in the exact table (`lower` exact since it entered, `upper − lower` the slack);
 * 1 below the threshold (`[0, estimate]`); 2 overflow (not in the table although its estimate
 * reached the threshold: the table was full).
 */
export type HeavyStanding = 0 | 1 | 2;

/** Bounds of a key's count, `lower <= count <= upper` (counts above 2^53 lose precision). */
export interface HeavyCount {
  lower: number;
  upper: number;
  standing: HeavyStanding;
}

/**
 * One row of `top`: a tracked key as the caller gave it, except that integer keys (numbers and
 * bigints name the same key) come back as a `number` when safe and a `bigint` otherwise.
 */
export interface HeavyTalker {
  key: Key;
  lower: number;
  upper: number;
}

/** One interval's counters (crates/limits/src/heavy/summary.rs `Stats`). */
export interface HeavyStats {
  tracked: number;
  capacity: number;
  total: number;
  overflowEvents: number;
  overflowWeight: number;
  mergeDropped: number;
}

/**
 * The first check of docs/format.md §6 a serialized heavy-hitter summary fails, in the spec's
 * order; `sketch` wraps any §5 failure of the embedded sketch. Two checks follow §6's: `key`, an
 * entry whose key is not in the stored form of §6.1, then `counts`, a count above 2^53 − 1 (which
 * JavaScript numbers would round).
 */
export type HeavyCorruptReason =
  | 'short'
  | 'magic'
  | 'version'
  | 'flags'
  | 'length'
  | 'checksum'
  | 'sketch-length'
  | 'sketch'
  | 'negative-counter'
  | 'config'
  | 'entries'
  | 'entry'
  | 'trailing'
  | 'order'
  | 'below-threshold'
  | 'key'
  | 'counts';

/**
 * `crates/limits/src/heavy/window.rs`' `HeavyHitters` keyed by JavaScript keys, on a time base the
 * caller supplies or on the host's clock (`nowMs` and `hostClock` as for {@link RateCore}). Keys are stored and hashed in their encoded
 * form (docs/format.md §6.1): a tag byte (0 string as UTF-8, 1 bytes, 2 integer as i64 LE) and the
 * payload, hashed as a Rust `&[u8]`. Each call first rolls the intervals over as `Rate` does.
 */
export interface HeavyCore {
  /**
   * Counts `value` (an integer in [1, 2^32 − 1]) for `key` in the current interval. Returns the
   * key's exact count since it entered the table (>= 0) if it is tracked after this increment;
   * otherwise `−1 − estimate`, its sketch estimate in the current interval encoded below zero.
   */
  incr(key: Key, value: number, nowMs: number): number;
  /**
   * {@link incr}, also writing to `window[0]` the ms the current interval has run after any
   * roll-over (so in [0, intervalMs)), from the same clock reading as the count.
   */
  incrInWindow(key: Key, value: number, nowMs: number, window: Float64Array): number;
  /** The ms the current interval has run, after rolling it over if it ended (then 0). */
  intervalElapsed(nowMs: number): number;
  /**
   * Takes back `value` (an integer in [1, 2^32 − 1]) counted for `key` in the current interval
   * (`Summary::decr`): a tracked key's exact count drops by `value`, saturating at 0; the sketch
   * is never decreased, so an untracked key keeps its estimate.
   */
  decr(key: Key, value: number, nowMs: number): void;
  count(key: Key, window: HeavyWindow, nowMs: number): HeavyCount;
  /** The `n` (>= 0) tracked keys with the largest upper bounds, ranked as `table::rank`. */
  top(n: number, window: HeavyWindow, nowMs: number): HeavyTalker[];
  stats(window: 0 | 1, nowMs: number): HeavyStats;
  /** `window`'s summary in docs/format.md §6 (canonical bytes). */
  serialize(window: 0 | 1, nowMs: number): Uint8Array;
  /**
   * Merges a serialized summary into `window`: `null` when merged; a reason when the bytes are
   * corrupt; `'mismatch'` when shape, seed or threshold differ (nothing changed then).
   */
  absorb(bytes: Uint8Array, window: 0 | 1, nowMs: number): HeavyCorruptReason | 'mismatch' | null;
  /** Frees both summaries now; `lib/` never calls the core again. */
  close(): void;
}

/**
 * `intervalMs` an integer in [1, 2^52]; the shape within §4; `seed` in [0, 2^64); `threshold` an
 * integer in [1, 2^53 − 1]; `capacity` an integer in [1, 2^24]; `hostClock` and `wallOriginMs` as
 * for {@link RateCoreConstructor}.
 */
export type HeavyCoreConstructor = new (
  intervalMs: number,
  hashes: number,
  slots: number,
  seed: bigint,
  threshold: number,
  capacity: number,
  hostClock: boolean,
  wallOriginMs?: number,
) => HeavyCore;

/**
 * Segments shared by the processes of a host (`crates/limits/src/shared.rs`): only the native
 * backend can map memory between processes, so the fallback's `shared` is `null`. Arguments are
 * validated by `lib/shared.ts`; what only the file system can tell (a segment with another
 * configuration, a damaged one, a refused file) the binding throws with its code
 * (`ERR_KEEPCOUNT_MISMATCH`, `ERR_KEEPCOUNT_CORRUPT`, `ERR_KEEPCOUNT_IO`).
 */
export interface SharedBackend {
  /** Opens or creates segment `name` in `dir` (`undefined`: the platform default) with file `mode`. */
  openEstimator(
    name: string,
    hashes: number,
    slots: number,
    seed: bigint,
    dir: string | undefined,
    mode: number,
  ): EstimatorCore;
  /** As {@link openEstimator}, for a rate on the host's monotonic clock: its methods ignore `nowMs`. */
  openRate(
    name: string,
    intervalMs: number,
    hashes: number,
    slots: number,
    seed: bigint,
    dir: string | undefined,
    mode: number,
  ): RateCore;
  /**
   * In-flight counts over segment `name` with `processes` slots (an integer in [1, 1024]); this
   * process's contribution is taken back by the survivors if it dies (the native adapter asks
   * every 100 ms whether it is its turn to for the host, `crates/limits/src/shared/inflight.rs`
   * `RECLAIM_INTERVAL`).
   */
  openInflight(
    name: string,
    hashes: number,
    slots: number,
    seed: bigint,
    processes: number,
    dir: string | undefined,
    mode: number,
  ): OwnedInflightCore;
  /**
   * Token buckets over segment `name` (`crates/limits/src/shared/limiter.rs`): one under `quota`
   * for each of up to `capacity` keys (an integer in [1, 2^22]), `bestEffort` for the keys beyond,
   * on the host's monotonic clock.
   */
  openLimiter(
    name: string,
    quota: QuotaSpec,
    bestEffort: QuotaSpec,
    capacity: number,
    seed: bigint,
    dir: string | undefined,
    mode: number,
  ): SharedLimiterCore;
  /** Removes segment `name`'s file; no error if there is none. */
  unlink(name: string, dir: string | undefined): void;
}

/** How full a shared limiter's key table is. */
export interface SharedLimiterStats {
  /** Keys in the table. */
  keys: number;
  /** The most keys the table takes. */
  capacity: number;
  /**
   * Checks sent to the best-effort bucket because the table was full and no entry within the key's
   * reach held a full bucket, by every process since creation.
   */
  overflow: number;
  /** Entries new keys took over from keys whose buckets were full, by every process since creation. */
  takeovers: number;
}

/** A shared limiter's buckets: as {@link LimiterCore.check}, on the host's clock (no `nowMs`). */
export interface SharedLimiterCore {
  check(key: Key, cost: number): number;
  stats(): SharedLimiterStats;
  close(): void;
}

/**
 * Sketches and rates over a `SharedArrayBuffer` that `lib/shared-buffer.ts` laid out and checked:
 * `counters` is a `BigInt64Array` over the whole buffer, header included, and every thread that
 * makes a core over the same buffer counts in the same memory. Both backends take the same
 * buffers and give the same answers on them.
 */
export interface BufferBackend {
  /** A sketch over the buffer's counters; the buffer holds one of this shape and seed. */
  estimator(counters: BigInt64Array, hashes: number, slots: number, seed: bigint): EstimatorCore;
  /**
   * A rate over the buffer's two sketches and interval word. Unlike {@link RateCore}'s usual time
   * base, `nowMs` is whole milliseconds on a clock every thread sharing the buffer reads from the
   * same origin (`lib/rate.ts` passes the `clock` option's reading, by default `process.hrtime`);
   * the interval word keeps `trunc(nowMs × 10^6)` nanoseconds.
   */
  rate(counters: BigInt64Array, intervalMs: number, hashes: number, slots: number, seed: bigint): RateCore;
}

/** What in-flight guards need of their counters. */
export type InflightCore = Pick<EstimatorCore, 'incr' | 'get'>;

/**
 * What `Inflight` holds: an {@link EstimatorCore}, or a shared in-flight core, whose `close` also
 * gives back what this process still holds and frees its slot.
 */
export type OwnedInflightCore = InflightCore & Pick<EstimatorCore, 'close'>;

/** One implementation of keepcount. */
export interface Backend {
  readonly name: BackendName;
  readonly Estimator: EstimatorCoreConstructor;
  /** Decodes a serialized sketch, or names the first check it fails. */
  deserializeEstimator(bytes: Uint8Array): EstimatorCore | CorruptReason;
  readonly Rate: RateCoreConstructor;
  readonly Limiter: LimiterCoreConstructor;
  readonly Heavy: HeavyCoreConstructor;
  readonly ticker: Ticker;
  /** Cross-process segments; `null` where the backend cannot share memory between processes. */
  readonly shared: SharedBackend | null;
  /** Sketches and rates in a `SharedArrayBuffer`, shared by worker threads. */
  readonly buffers: BufferBackend;
}
