/** The count-min sketch: approximate counts for any number of keys in fixed memory. */
import { closedError, closedEstimator, dispose, isClosed } from './closed.js';
import { active } from './backend.js';
import type { EstimatorCore, Key } from './core.js';
import { invalidType, outOfRange, withCode } from './errors.js';
import { validateKey, isUint8Array } from './keys.js';
import { MAX_COUNTERS, MAX_HASHES, serializedBytes } from './limits.js';
import { countArgument, integerOption, optionsObject, seedOption, shapeOptions } from './options.js';
import { corruptError } from './corrupt.js';
import { createBuffer, readBuffer } from './shared-buffer.js';
import {
  inSharedDir,
  sharedBackend,
  sharedDir,
  sharedMode,
  sharedName,
  sharedSeed,
  type SharedCreation,
  type SharedPlacement,
} from './shared.js';

/** Options of {@link Estimator}. */
export interface EstimatorOptions {
  /**
   * Rows of counters: each key touches one counter per row and its estimate is their minimum.
   * An integer in [1, 32]. Defaults to 4.
   */
  hashes?: number;
  /**
   * Counters per row. An integer >= 1 with `hashes × slots <= 2^27`. Defaults to 8192 (with the
   * default 4 hashes: 256 KiB, and a key's estimate is off only if another key shares its counter
   * in all 4 rows).
   */
  slots?: number;
  /**
   * The hash key: sketches merge only with sketches of the same seed, and someone who does
   * not know it cannot craft colliding keys. A bigint in [0, 2^64) or a safe integer >= 0.
   * Defaults to a random seed from `crypto.getRandomValues`.
   */
  seed?: bigint | number;
}

/** Options of {@link Estimator.fromErrorBounds}. */
export interface ErrorBoundsOptions {
  /** The tolerated overestimate as a fraction of the total count N: a number in (0, 1). Required. */
  epsilon: number;
  /** The probability of exceeding `epsilon × N`: a number in (0, 1). Required. */
  delta: number;
  /** As {@link EstimatorOptions.seed}. Defaults to a random seed. */
  seed?: bigint | number;
}

/** Options of {@link Estimator.openShared}. */
export interface SharedEstimatorOptions extends SharedCreation {
  /** As {@link EstimatorOptions.hashes}; every process must pass the same. Defaults to 4. */
  hashes?: number;
  /** As {@link EstimatorOptions.slots}; every process must pass the same. Defaults to 8192. */
  slots?: number;
  /**
   * As {@link EstimatorOptions.seed}, but required: every process must pass the same seed (a
   * random default would differ per process). Keep it secret as you would a key.
   */
  seed: bigint | number;
}

/**
 * What {@link Estimator.fromSharedBuffer} checks the buffer against: each field given must equal
 * the buffer's, or `ERR_KEEPCOUNT_MISMATCH`; a field left out is taken from the buffer.
 */
export interface SharedBufferEstimatorOptions {
  /** The rows the buffer must have. */
  hashes?: number;
  /** The counters per row the buffer must have. */
  slots?: number;
  /** The seed the buffer must have. */
  seed?: bigint | number;
}

/** pingora-limits Inflight's shape: 4 hashes keep lookups cheap, 8192 slots keep collisions rare. */
const DEFAULT_SHAPE = { hashes: 4, slots: 8192 };

/**
 * A decoded core for the constructor to adopt instead of making a sketch. Not exported, so only
 * {@link Estimator.deserialize} can make one and no caller can pass a core of its own.
 */
class Adopted {
  constructor(readonly core: EstimatorCore) {}
}

/**
 * A count-min sketch (Cormode & Muthukrishnan): `incr` and `get` cost one hash and `hashes` counter
 * touches; an estimate is never below the true count (for non-negative increments) and exceeds it
 * only through collisions.
 *
 * Counts are exact within ±2^53 (`Number.MAX_SAFE_INTEGER`); beyond that the fallback backend
 * rounds and the native one converts its i64 counters to the nearest number. Both saturate at
 * ±2^63 instead of wrapping (docs/format.md §5).
 *
 * @example
 * ```ts
 * const hits = new Estimator({ seed: 42n });
 * hits.incr('1.2.3.4');
 * hits.get('1.2.3.4'); // 1
 * ```
 */
export class Estimator {
  #core: EstimatorCore;

  /** An empty sketch. Throws `RangeError` `ERR_OUT_OF_RANGE` for a shape outside the limits. */
  constructor(options?: EstimatorOptions);
  /** @internal {@link Estimator.deserialize}'s way in. */
  constructor(adopted: Adopted);
  constructor(options?: EstimatorOptions | Adopted) {
    if (options instanceof Adopted) {
      this.#core = options.core;
      return;
    }
    const o = optionsObject(options);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    this.#core = new active.Estimator(hashes, slots, seedOption(o.seed));
  }

  /**
   * A sketch sized so that an estimate exceeds the true count by more than `epsilon × N` (N: the
   * total of all increments) with probability at most `delta`: `slots = ceil(e / epsilon)`,
   * `hashes = ceil(ln(1 / delta))`. Throws `RangeError` if that shape is outside the limits.
   */
  static fromErrorBounds(options: ErrorBoundsOptions): Estimator {
    const o = optionsObject(options);
    const epsilon = openUnitOption('epsilon', o.epsilon);
    const delta = openUnitOption('delta', o.delta);
    const slots = Math.ceil(Math.E / epsilon);
    const hashes = Math.ceil(Math.log(1 / delta));
    if (hashes > MAX_HASHES) {
      throw outOfRange('The "delta" option', `at least e^-${MAX_HASHES} (at most ${MAX_HASHES} hashes)`, delta);
    }
    if (hashes * slots > MAX_COUNTERS) {
      throw outOfRange(
        'The "epsilon" option',
        `large enough for ${hashes} × ceil(e / epsilon) <= ${MAX_COUNTERS} counters`,
        epsilon,
      );
    }
    return new Estimator({ hashes, slots, seed: o.seed });
  }

  /**
   * Reads a sketch written by {@link Estimator.serialize} (either backend, or the Rust crate).
   * Throws `ERR_KEEPCOUNT_CORRUPT` naming the first check that failed.
   */
  static deserialize(bytes: Uint8Array): Estimator {
    if (!isUint8Array(bytes)) throw invalidType('The "bytes" argument', 'an instance of Uint8Array', bytes);
    const core = active.deserializeEstimator(bytes);
    if (typeof core === 'string') throw corruptError(core, bytes);
    return new Estimator(new Adopted(core));
  }

  /**
   * The sketch `name`, shared by every process of this host that opens it: their increments go to
   * the same counters, so a limit holds for all of them together (`node:cluster`, PM2, containers
   * sharing `/dev/shm`). The first process to open a name creates its segment file,
   * `<dir>/keepcount.<name>`, with the given shape and seed; later ones must pass the same, or get
   * `ERR_KEEPCOUNT_MISMATCH` naming what differs. A segment outlives the processes and is reused
   * with its counts by the next run: {@link Estimator.unlink} it to start from zero. No locks:
   * a process killed at any moment leaves the counters valid.
   *
   * Throws `ERR_KEEPCOUNT_UNSUPPORTED` on the TypeScript fallback (it cannot share memory between
   * processes), `ERR_KEEPCOUNT_CORRUPT` for a damaged segment file, `ERR_KEEPCOUNT_MISMATCH`
   * (`layout version`) for one another keepcount version made (unlink it once no process of that
   * version has it open), `ERR_KEEPCOUNT_IO` when the system refuses the file. `close()` unmaps it
   * from this process; the file stays.
   *
   * @example
   * ```ts
   * // In every worker of a node:cluster:
   * const hits = Estimator.openShared('hits', { seed: BigInt(process.env.KEEPCOUNT_SEED!) });
   * hits.incr(clientIp); // counts for the whole host
   * ```
   */
  static openShared(name: string, options: SharedEstimatorOptions): Estimator {
    const n = sharedName(name);
    const o = optionsObject<SharedEstimatorOptions>(options);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    const seed = sharedSeed(o.seed);
    const dir = sharedDir(o);
    const mode = sharedMode(o);
    const shared = sharedBackend('Estimator.openShared');
    return new Estimator(
      new Adopted(inSharedDir(dir, n, () => shared.openEstimator(n, hashes, slots, seed, dir, mode))),
    );
  }

  /**
   * A `SharedArrayBuffer` holding an empty sketch of the given shape and seed (a random one by
   * default; it is stored in the buffer), `128 + 8 × hashes × slots` bytes: pass it to worker
   * threads (`postMessage`, `workerData`) and make an `Estimator` over it in each with
   * {@link Estimator.fromSharedBuffer}. Throws `RangeError` for a shape outside the limits.
   */
  static createSharedBuffer(options?: EstimatorOptions): SharedArrayBuffer {
    const o = optionsObject(options);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, DEFAULT_SHAPE);
    return createBuffer({ kind: 'estimator', hashes, slots, seed: seedOption(o.seed), intervalMs: 0 });
  }

  /**
   * A sketch whose counters are `buffer`'s, made by {@link Estimator.createSharedBuffer}: every
   * worker thread that makes one over the same buffer counts in the same memory, without copying
   * and without locks (atomic operations on either backend; the two backends can share a buffer
   * and give the same answers). Its shape and seed come from the buffer; any given in `options`
   * must match (`ERR_KEEPCOUNT_MISMATCH` names the first that differs).
   *
   * Throws `TypeError` unless `buffer` is a `SharedArrayBuffer`, `RangeError` if it is too short
   * to hold a header, `ERR_KEEPCOUNT_CORRUPT` if it was not made by `createSharedBuffer` (header
   * magic, checksum, layout or length), `ERR_KEEPCOUNT_MISMATCH` if another keepcount version's
   * `createSharedBuffer` made it (another layout). `close()` lets go of the buffer in this thread;
   * the counts stay for the others.
   *
   * @example
   * ```ts
   * const buffer = Estimator.createSharedBuffer({ seed: 42n });
   * const worker = new Worker('./count.js', { workerData: buffer });
   * // In count.js: const hits = Estimator.fromSharedBuffer(workerData); hits.incr(ip);
   * Estimator.fromSharedBuffer(buffer).get(ip); // every thread's increments
   * ```
   */
  static fromSharedBuffer(buffer: SharedArrayBuffer, options?: SharedBufferEstimatorOptions): Estimator {
    const o = optionsObject(options);
    const layout = readBuffer(buffer, {
      kind: 'estimator',
      hashes: o.hashes === undefined ? undefined : integerOption('hashes', o.hashes, 1, MAX_HASHES),
      slots: o.slots === undefined ? undefined : integerOption('slots', o.slots, 1, MAX_COUNTERS),
      seed: o.seed === undefined ? undefined : seedOption(o.seed),
    });
    const counters = new BigInt64Array(buffer);
    return new Estimator(new Adopted(active.buffers.estimator(counters, layout.hashes, layout.slots, layout.seed)));
  }

  /**
   * Removes the shared segment `name` (of a sketch, a rate or in-flight counts) from `dir`: processes that have it
   * open keep counting in the old one until they close it; the next `openShared` starts afresh.
   * No error if it does not exist. `ERR_KEEPCOUNT_UNSUPPORTED` on the TypeScript fallback.
   */
  static unlink(name: string, options?: SharedPlacement): void {
    const n = sharedName(name);
    const dir = sharedDir(optionsObject(options));
    const shared = sharedBackend('Estimator.unlink');
    inSharedDir(dir, n, () => shared.unlink(n, dir));
  }

  /** Rows of counters. */
  get hashes(): number {
    return this.#core.hashes;
  }

  /** Counters per row. */
  get slots(): number {
    return this.#core.slots;
  }

  /** The hash seed, in [0, 2^64). */
  get seed(): bigint {
    return this.#core.seed;
  }

  /** Length in bytes of {@link serialize}'s output: `28 + 8 × hashes × slots`. */
  get byteLength(): number {
    return serializedBytes(this.#core.hashes, this.#core.slots);
  }

  /** Adds `value` (a safe integer, may be negative; defaults to 1) to `key`; returns its new estimate. */
  incr(key: Key, value = 1): number {
    // Arguments first, then the core: a core read first would be the one before any close that
    // validation might run into.
    const k = validateKey(key);
    const v = countArgument('value', value);
    return this.#core.incr(k, v);
  }

  /** Subtracts `value` (a safe integer; defaults to 1) from `key`; returns its new estimate. */
  decr(key: Key, value = 1): number {
    const k = validateKey(key);
    const v = countArgument('value', value);
    return this.#core.incr(k, -v);
  }

  /** `key`'s estimated count. */
  get(key: Key): number {
    const k = validateKey(key);
    return this.#core.get(k);
  }

  /**
   * Where `key`'s counters are: one index per row into the row-major counters of
   * {@link serialize}'s output (counter `i` is the i64 at byte `24 + 8·i`). For explaining an
   * over-count (which keys share a client's counters) and for testing the rows' independence.
   */
  counterIndexes(key: Key): number[] {
    const k = validateKey(key);
    return this.#core.counterIndexes(k);
  }

  /** Forgets every count. */
  reset(): void {
    this.#core.reset();
  }

  /**
   * Adds `other`'s counts to this sketch, as if every increment of both had been made here.
   * Throws `ERR_KEEPCOUNT_MISMATCH` unless both have the same hashes, slots and seed.
   */
  merge(other: Estimator): void {
    // A brand check, not `instanceof`: an object made from the prototype (`Object.create`) has no core.
    if (typeof other !== 'object' || other === null || !(#core in other)) {
      throw invalidType('The "other" argument', 'an instance of Estimator', other);
    }
    const a = this.#core;
    const b = other.#core;
    // Closed before mismatched: a closed sketch keeps its shape, and no merge reaches it anyway.
    if (isClosed(a) || isClosed(b)) throw closedError('Estimator');
    if (a.hashes !== b.hashes || a.slots !== b.slots || a.seed !== b.seed) {
      throw withCode(
        new Error(
          // Whether the seeds differ, never the seeds: messages end up in logs, and the seed is secret.
          `Cannot merge a ${b.hashes}×${b.slots} sketch into a ${a.hashes}×${a.slots} sketch` +
            `${a.seed === b.seed ? '' : ' with another seed'}: hashes, slots and seed must be equal`,
        ),
        'ERR_KEEPCOUNT_MISMATCH',
      );
    }
    a.merge(b);
  }

  /**
   * Frees the counters now, rather than when the garbage collector gets to this object: native
   * counters live outside V8's heap, and a loop that makes and drops sketches without yielding to
   * the event loop never gives Node the chance to free them. Any later call but the shape
   * getters throws `ERR_KEEPCOUNT_CLOSED`. Idempotent; `using` calls it too.
   */
  close(): void {
    if (isClosed(this.#core)) return;
    // The stand-in reads the shape first: a closed native core no longer knows it.
    const standIn = closedEstimator(this.#core);
    this.#core.close();
    this.#core = standIn;
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }

  /** The sketch in the stable version-3 format (docs/format.md §5), {@link byteLength} bytes. */
  serialize(): Uint8Array {
    return this.#core.serialize();
  }
}

function openUnitOption(name: string, value: unknown): number {
  if (typeof value !== 'number') throw invalidType(`The "${name}" option`, 'of type number', value);
  if (!(value > 0 && value < 1)) throw outOfRange(`The "${name}" option`, 'a number in (0, 1)', value);
  return value;
}
