/**
 * Heavy hitters: which keys sent the most in the current or last interval, with exact counts for
 * them, in bounded memory. The sketch is the first-stage filter of Cloudflare's pingora blog post:
 * every increment goes to a count-min sketch, and a key whose estimate reaches `threshold` enters a
 * bounded exact table that counts it exactly from then on and can list it.
 *
 * @module
 */
import { active } from './backend.js';
import { closedError, closedHeavy, dispose, isClosed } from './closed.js';
import type { HeavyCore, HeavyCorruptReason, HeavyStats, HeavyTalker, HeavyWindow, Key } from './core.js';
import { Stopwatch, type Clock } from './clock.js';
import { invalidType, outOfRange, withCode, type KeepcountError } from './errors.js';
import { isUint8Array, tableKey } from './keys.js';
import { integerOption, optionsObject, seedOption, shapeOptions } from './options.js';

export type { HeavyStats, HeavyTalker } from './core.js';

/** Longest interval: 2^52 ms, as for `Rate`. */
const MAX_INTERVAL_MS = 4503599627370496;
/** The most keys a table holds (crates/limits `MAX_CAPACITY`). */
export const MAX_CAPACITY = 2 ** 24;
/** Largest increment of one call: the Rust core counts `u32` values. */
export const MAX_VALUE = 2 ** 32 - 1;

/** Which interval a query reads. */
export type HeavyWindowName = 'current' | 'previous' | 'both';

const WINDOWS: Record<HeavyWindowName, HeavyWindow> = { current: 0, previous: 1, both: 2 };

/** What a key's bounds are made of. */
export type Standing = 'tracked' | 'below-threshold' | 'overflow';

const STANDINGS: readonly Standing[] = ['tracked', 'below-threshold', 'overflow'];

/** Bounds on a key's true count: `lower <= count <= upper`. */
export interface KeyCount {
  /** A count the key has certainly reached (exact since it entered the table; 0 if not tracked). */
  lower: number;
  /** A count the key has certainly not exceeded. */
  upper: number;
  /**
   * `'tracked'`: in the exact table, `upper − lower` is the slack (at most `threshold − 1` unless
   * the summary merged another). `'below-threshold'`: its count is below the threshold; `upper`
   * is its sketch estimate, or `threshold − 1` when other keys raised that to the threshold while
   * the table had room (so a flood never reads a key it did not track over `threshold − 1`).
   * `'overflow'`: its estimate reached the threshold and the table is full (or the summary merged
   * another, whose counts of the key never met the entry rule here).
   */
  standing: Standing;
}

/** Options of {@link HeavyHitters}. */
export interface HeavyHittersOptions {
  /** Length of one counting interval in milliseconds: an integer in [1, 2^52]. Required. */
  intervalMs: number;
  /**
   * The sketch estimate at which a key enters the exact table: an integer >= 1. A tracked key's
   * count is exact to within `threshold − 1`; lower thresholds track more keys. Required.
   */
  threshold: number;
  /**
   * The most keys the table holds per interval: an integer in [1, 2^24]. The first `capacity` keys
   * to cross the threshold in an interval are tracked; later ones overflow (counted in
   * {@link HeavyHitters.stats}). Defaults to 1024.
   */
  capacity?: number;
  /** Rows of each sketch; see `EstimatorOptions.hashes`. Defaults to 4. */
  hashes?: number;
  /** Counters per row of each sketch. Defaults to 4096 (128 KiB per sketch with 4 rows). */
  slots?: number;
  /** The hash seed; see `EstimatorOptions.seed`. Defaults to a random seed. */
  seed?: bigint | number;
  /** Where time comes from, e.g. a `ManualClock`. Defaults to the process's monotonic clock. */
  clock?: Clock;
}

/**
 * Counts keys per interval and names the heaviest, with exact counts for every key that reached
 * `threshold` (the first `capacity` of them per interval).
 *
 * Guarantees for one interval, with `f(k)` a key's true count (its increments less its
 * {@link decr} refunds), `N` the interval's total, and a sketch of `d` rows × `w` columns:
 * - {@link count} returns `lower <= f(k) <= upper` for every key, always.
 * - A tracked key is exact from its entering increment: `upper − lower <= threshold − 1`.
 * - No false heavy hitter: a key enters only if its estimate reached `threshold`; a key whose
 *   count stays below `threshold − e·N/w` enters with probability at most `e^−d`, over a seed
 *   the sender does not know (one who knows it can make any key enter on its first increment).
 * - No missed one: a key whose true count reached `threshold` is tracked, unless the table was
 *   full when it crossed; then its standing is `'overflow'` and {@link stats} counts it.
 * - Memory: two sketches (`16·d·w` bytes) and two tables of at most `capacity` keys.
 *
 * The table never evicts within an interval (unlike Space-Saving): a tracked key stays exactly
 * counted until the interval after next begins, so a flood of fresh keys cannot reset what is
 * known about a flooder. Intervals work as in {@link Rate}: the current one and the previous one,
 * rotated by the first call after an interval ends.
 *
 * @example
 * ```ts
 * const heavy = new HeavyHitters({ intervalMs: 60_000, threshold: 100 });
 * heavy.incr(clientIp);
 * heavy.top(10, 'previous'); // the top talkers of the last minute, with exact counts
 * ```
 */
export class HeavyHitters {
  /** The interval length in milliseconds. */
  readonly intervalMs: number;
  /** The estimate at which a key enters the table. */
  readonly threshold: number;
  /** The most keys the table holds per interval. */
  readonly capacity: number;
  /** Rows of each sketch. */
  readonly hashes: number;
  /** Counters per row. */
  readonly slots: number;
  /** The hash seed. */
  readonly seed: bigint;
  #core: HeavyCore;
  /**
   * Reads the user's clock for the core; `undefined` without a `clock` option, when the core
   * reads the host's clock itself, inside the call it makes anyway.
   */
  readonly #stopwatch: Stopwatch | undefined;
  /** Where the core writes how far the interval has run, for {@link incrWindow}. */
  readonly #window = new Float64Array(1);

  constructor(options: HeavyHittersOptions) {
    const o = optionsObject(options);
    this.intervalMs = integerOption('intervalMs', o.intervalMs, 1, MAX_INTERVAL_MS);
    this.threshold = integerOption('threshold', o.threshold, 1, Number.MAX_SAFE_INTEGER);
    this.capacity = integerOption('capacity', o.capacity, 1, MAX_CAPACITY, 1024);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 4096 });
    this.hashes = hashes;
    this.slots = slots;
    this.seed = seedOption(o.seed);
    const stopwatch = o.clock === undefined ? undefined : new Stopwatch(o.clock);
    this.#stopwatch = stopwatch;
    this.#core = new active.Heavy(
      this.intervalMs,
      hashes,
      slots,
      this.seed,
      this.threshold,
      this.capacity,
      o.clock === undefined,
      stopwatch?.wallOriginMs,
    );
  }

  /**
   * Counts `value` (an integer in [1, 2^32 − 1]; defaults to 1) for `key` in the current interval
   * and returns the count a limit should compare: the key's exact count since it entered the table
   * if it is tracked, else its sketch estimate (below `threshold` unless the table is full).
   */
  incr(key: Key, value = 1): number {
    const k = tableKey(key);
    const v = valueArgument(value);
    // The clock first, then the core: a clock that closes this object swaps the core out, and
    // the call must go to the closed one (ERR_KEEPCOUNT_CLOSED), not to the freed one.
    const now = this.#elapsed();
    const r = this.#core.incr(k, v, now);
    return r >= 0 ? r : -1 - r;
  }

  /**
   * {@link incr}, also telling how long the current interval still runs: the `count` {@link incr}
   * returns and `resetMs`, {@link intervalRemainingMs} at the same instant. One clock read for
   * both, where `incr` then `intervalRemainingMs` take two: what a fixed-window quota reports on
   * every request. `tracked`: whether `key` is in the table after this increment (`count` is then
   * its exact count since it entered, else its sketch estimate), which a quota reports its
   * headers' `remaining` from without a second look-up.
   */
  incrWindow(key: Key, value = 1): { count: number; resetMs: number; tracked: boolean } {
    const k = tableKey(key);
    const v = valueArgument(value);
    const now = this.#elapsed();
    const r = this.#core.incrInWindow(k, v, now, this.#window);
    const resetMs = this.intervalMs - this.#window[0]!;
    return r >= 0 ? { count: r, resetMs, tracked: true } : { count: -1 - r, resetMs, tracked: false };
  }

  /**
   * Takes back `value` (defaults to 1) counted for `key` in the current interval, e.g. a request
   * that should not have counted. A tracked key's exact count drops (not below 0); the sketch is
   * never decreased, so an untracked key's estimate stays as it is (still an upper bound).
   */
  decr(key: Key, value = 1): void {
    const k = tableKey(key);
    const v = valueArgument(value);
    const now = this.#elapsed();
    this.#core.decr(k, v, now);
  }

  /** Bounds on `key`'s count in `window` (defaults to `'current'`). */
  count(key: Key, window: HeavyWindowName = 'current'): KeyCount {
    const k = tableKey(key);
    const w = windowArgument(window);
    const now = this.#elapsed();
    const c = this.#core.count(k, w, now);
    return { lower: c.lower, upper: c.upper, standing: STANDINGS[c.standing]! };
  }

  /**
   * The `n` tracked keys with the largest upper bounds in `window` (defaults to `'current'`),
   * largest first (ties: larger lower bound first). Integer keys come back as numbers when safe,
   * else as bigints. With `'both'`, a key tracked in one interval only gets the other interval's
   * sketch estimate added to its upper bound.
   */
  top(n: number, window: HeavyWindowName = 'current'): HeavyTalker[] {
    const w = topArguments(n, window);
    const now = this.#elapsed();
    return this.#core.top(n, w, now);
  }

  /** `window`'s counters (defaults to `'current'`): tracked keys, total, overflow. */
  stats(window: 'current' | 'previous' = 'current'): HeavyStats {
    const w = summaryArgument(window);
    const now = this.#elapsed();
    return this.#core.stats(w, now);
  }

  /** `window`'s summary (defaults to `'current'`) in docs/format.md §6, canonical bytes. */
  serialize(window: 'current' | 'previous' = 'current'): Uint8Array {
    const w = summaryArgument(window);
    const now = this.#elapsed();
    return this.#core.serialize(w, now);
  }

  /**
   * Merges another node's summary into `window` (defaults to `'current'`): `source` is a
   * {@link serialize} output or a `HeavyHitters` (both of its intervals then merge into the same
   * intervals here). The sketches add; the tables merge with bounds that stay valid (docs in
   * crates/limits/src/heavy.rs). Throws `ERR_KEEPCOUNT_CORRUPT` for invalid bytes and
   * `ERR_KEEPCOUNT_MISMATCH` unless hashes, slots, seed and threshold are equal; nothing changes
   * then. Other settings are read from the header once the checksum holds, before anything else
   * is decoded (docs/format.md §6), so refusing them costs no memory, whatever the input's size.
   * A `HeavyHitters` whose counts merges have piled past 2^53 − 1 (what a JavaScript number holds
   * exactly, so what a summary may carry into Node) is refused with `RangeError`
   * `ERR_OUT_OF_RANGE`, before either interval merges.
   */
  merge(source: HeavyHitters | Uint8Array, window: 'current' | 'previous' = 'current'): void {
    // A brand check, not `instanceof`: an object made from the prototype (`Object.create`) has no core.
    if (typeof source === 'object' && source !== null && #core in source) {
      if (isClosed(this.#core) || isClosed(source.#core)) throw closedError('HeavyHitters');
      const current = source.serialize('current');
      const previous = source.serialize('previous');
      // All or nothing: both intervals are checked before either merges, so a refused previous
      // interval cannot leave the current one merged.
      this.#check(current, source);
      this.#check(previous, source);
      this.#absorb(current, 0);
      this.#absorb(previous, 1);
      return;
    }
    if (!isUint8Array(source)) {
      throw invalidType('The "source" argument', 'an instance of HeavyHitters or Uint8Array', source);
    }
    this.#absorb(source, summaryArgument(window));
  }

  /** Frees both summaries now; any later call throws `ERR_KEEPCOUNT_CLOSED`. Idempotent. */
  close(): void {
    if (isClosed(this.#core)) return;
    this.#core.close();
    this.#core = closedHeavy();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }

  /**
   * Milliseconds until the current interval ends, at least 1. An interval that has ended is
   * replaced by the next call, so it reads as a whole interval.
   */
  intervalRemainingMs(): number {
    const now = this.#elapsed();
    return this.intervalMs - this.#core.intervalElapsed(now);
  }

  /**
   * Throws what {@link #absorb} would for `bytes`, `source`'s own summary, changing nothing: they
   * are merged into a scratch table of this one's settings, freed at once. A live summary fails
   * only on settings or on counts merges piled past 2^53 − 1, which is no corruption: a
   * `RangeError` then.
   */
  #check(bytes: Uint8Array, source: HeavyHitters): void {
    const scratch = new active.Heavy(
      this.intervalMs,
      this.hashes,
      this.slots,
      this.seed,
      this.threshold,
      this.capacity,
      false,
    );
    let failure;
    try {
      failure = scratch.absorb(bytes, 0, 0);
    } finally {
      scratch.close();
    }
    if (failure === 'counts') {
      throw outOfRange(
        'The "source" argument',
        'a HeavyHitters whose counts are at most 2^53 − 1 (merges piled them higher)',
        source,
      );
    }
    this.#raise(failure);
  }

  #absorb(bytes: Uint8Array, window: 0 | 1): void {
    const now = this.#elapsed();
    this.#raise(this.#core.absorb(bytes, window, now));
  }

  /** The error for a failed merge (`absorb`'s answer), if it failed. */
  #raise(failure: HeavyCorruptReason | 'mismatch' | null): void {
    if (failure === 'mismatch') {
      throw withCode(
        new Error(
          `Cannot merge heavy-hitter summaries: hashes, slots, seed and threshold must be equal ` +
            `(this one: ${this.hashes}×${this.slots}, threshold ${this.threshold}; seeds are secret and not shown)`,
        ),
        'ERR_KEEPCOUNT_MISMATCH',
      );
    }
    if (failure !== null) throw heavyCorruptError(failure);
  }

  /**
   * The time to pass to the core: whole milliseconds since construction, as `Rate` counts them
   * (`Stopwatch.reading`); 0 when the core reads the host's clock itself (and ignores it).
   */
  #elapsed(): number {
    const stopwatch = this.#stopwatch;
    return stopwatch === undefined ? 0 : stopwatch.reading();
  }
}

function valueArgument(value: unknown): number {
  if (typeof value !== 'number') throw invalidType('The "value" argument', 'of type number', value);
  if (!Number.isInteger(value) || value < 1 || value > MAX_VALUE) {
    throw outOfRange('The "value" argument', `an integer in [1, ${MAX_VALUE}]`, value);
  }
  return value;
}

/**
 * Checks the arguments of {@link HeavyHitters.top} (`window` defaults to `'current'`) and returns
 * the window. Every `topTalkers` calls it too, also one that lists nobody (no heavy hitters kept,
 * a store not initialized), so that a bad query is refused with the same error whether or not
 * anyone is counted, rather than answered with `[]` only where nobody is.
 */
export function topArguments(n: unknown, window: unknown = 'current'): HeavyWindow {
  if (typeof n !== 'number') throw invalidType('The "n" argument', 'of type number', n);
  if (!Number.isInteger(n) || n < 0 || n > MAX_CAPACITY) {
    throw outOfRange('The "n" argument', `an integer in [0, ${MAX_CAPACITY}]`, n);
  }
  return windowArgument(window);
}

function windowArgument(window: unknown): HeavyWindow {
  if (typeof window !== 'string' || !Object.hasOwn(WINDOWS, window)) {
    throw invalidType('The "window" argument', "one of 'current', 'previous', 'both'", window);
  }
  return WINDOWS[window as HeavyWindowName];
}

function summaryArgument(window: unknown): 0 | 1 {
  if (window === 'current') return 0;
  if (window === 'previous') return 1;
  throw invalidType('The "window" argument', "one of 'current', 'previous'", window);
}

/** What each failed check of docs/format.md §6 means, for `ERR_KEEPCOUNT_CORRUPT`'s message. */
const CORRUPT_MESSAGES: Record<HeavyCorruptReason, string> = {
  short: 'is shorter than the 64 bytes of header and checksum',
  magic: 'does not start with the magic "KCHH"',
  version: 'has a format version this keepcount does not read (it reads version 1)',
  flags: 'has reserved flag bits set',
  length: 'is not as long as its header declares (truncated or extended)',
  checksum: 'fails its CRC-32 check: the bytes were corrupted',
  'sketch-length': 'declares a sketch longer than the input',
  sketch: 'embeds an invalid sketch (docs/format.md §5)',
  'negative-counter': "has a negative sketch counter, which no summary writes (a summary's sketch only grows)",
  config: 'has a threshold or capacity out of range',
  entries: 'has more entries than its capacity',
  entry: 'has an entry running past the end of the input',
  trailing: 'has bytes after its last entry',
  order: 'has keys out of order or repeated',
  'below-threshold': 'has a tracked key whose sketch estimate is below the threshold',
  key: 'has a key that is not in the stored form of docs/format.md §6.1',
  counts: 'has a count above 2^53 − 1, which keepcount for Node does not read (JavaScript numbers would round it)',
};

function heavyCorruptError(reason: HeavyCorruptReason): KeepcountError {
  return withCode(new Error(`Serialized heavy-hitter summary ${CORRUPT_MESSAGES[reason]}`), 'ERR_KEEPCOUNT_CORRUPT');
}
