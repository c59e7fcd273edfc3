/**
 * Cheap timeouts in the style of pingora-timeout: deadlines are rounded UP to a 10 ms grid and every
 * waiter of one grid tick shares one bucket, armed once on the backend's {@link Ticker}. A call
 * costs about one extra `await`: no per-call timer, nothing to cancel when the promise wins (its
 * entry is skipped when the tick fires).
 *
 * Pending `timeout`s and `sleep`s keep the process alive as `setTimeout` does; once none is
 * pending, nothing does. `timeoutSignal`s, like `AbortSignal.timeout`, do not keep it alive.
 *
 * @module
 */
import { active, type TickHandle } from './backend.js';
import { invalidType, TimeoutError } from './errors.js';
import { millisecondsArgument } from './options.js';
import { setMaxListeners } from 'node:events';

/** Deadline granularity in milliseconds. */
const GRID_MS = 10;

/** The waiters of one grid tick. */
class Bucket {
  /** Pairs of (reject or `undefined` once the promise settled, ms asked for). */
  private entries: unknown[] = [];
  private sleepers: (() => void)[] = [];
  private controller: AbortController | undefined;
  /** Entries and sleepers still waiting: the tick keeps the process alive while this is > 0. */
  private pending = 0;
  private readonly handle: TickHandle;

  constructor(readonly deadline: number) {
    this.handle = active.ticker.arm(deadline, this.fire);
    this.handle.unref();
  }

  /** Adds a `timeout` waiter; returns its index for {@link settle}. */
  addTimeout(reject: (reason: unknown) => void, ms: number): number {
    this.hold();
    return this.entries.push(reject, ms) - 2;
  }

  /** The `timeout` waiter at `index` lost interest: its promise settled first. */
  settle(index: number): void {
    if (this.entries[index] === undefined) return;
    this.entries[index] = undefined;
    if (--this.pending === 0) this.handle.unref();
  }

  addSleeper(resolve: () => void): void {
    this.hold();
    this.sleepers.push(resolve);
  }

  signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      // Every fetch of this tick may listen to the same signal.
      setMaxListeners(0, this.controller.signal);
    }
    return this.controller.signal;
  }

  private hold(): void {
    if (this.pending++ === 0) this.handle.ref();
  }

  private readonly fire = (): void => {
    buckets.delete(this.deadline);
    if (last === this) last = undefined;
    const { entries, sleepers, controller } = this;
    this.entries = [];
    this.sleepers = [];
    this.pending = 0;
    for (let i = 0; i < entries.length; i += 2) {
      const reject = entries[i] as ((reason: unknown) => void) | undefined;
      if (reject !== undefined) reject(new TimeoutError(entries[i + 1] as number));
    }
    for (const resolve of sleepers) resolve();
    controller?.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
  };
}

const buckets = new Map<number, Bucket>();
/** The most recently used bucket: calls in a burst mostly share it, skipping the map lookup. */
let last: Bucket | undefined;
let paused = false;

function bucketFor(ms: number): Bucket {
  const deadline = Math.ceil((active.ticker.now() + ms) / GRID_MS) * GRID_MS;
  if (last !== undefined && last.deadline === deadline) return last;
  let bucket = buckets.get(deadline);
  if (bucket === undefined) {
    bucket = new Bucket(deadline);
    buckets.set(deadline, bucket);
  }
  last = bucket;
  return bucket;
}

function validMs(ms: unknown): number {
  return millisecondsArgument('The "ms" argument', ms, Number.MAX_SAFE_INTEGER);
}

/**
 * Settles as `promise` does, or rejects with a {@link TimeoutError} (`ERR_KEEPCOUNT_TIMEOUT`) if
 * `ms` milliseconds (a number in [0, 2^53)) pass first. Never times out early: the deadline is
 * rounded up to the next 10 ms grid point, so it fires at most about one tick (plus event-loop
 * delay) late. Invalid arguments reject with `ERR_INVALID_ARG_TYPE` / `ERR_OUT_OF_RANGE`.
 *
 * While paused for fork ({@link pauseForFork}) it times out at once unless `promise` is already
 * settled, as pingora-timeout does.
 */
export function timeout<T>(promise: PromiseLike<T>, ms: number): Promise<T> {
  try {
    validMs(ms);
    if (typeof (promise as PromiseLike<T> | null)?.then !== 'function') {
      throw invalidType('The "promise" argument', 'a promise or thenable', promise);
    }
  } catch (error) {
    return Promise.reject(error as Error);
  }
  if (paused) {
    return new Promise<T>((resolve, reject) => {
      promise.then(resolve, reject);
      queueMicrotask(() => reject(new TimeoutError(ms)));
    });
  }
  const bucket = bucketFor(ms);
  return new Promise<T>((resolve, reject) => {
    const index = bucket.addTimeout(reject, ms);
    promise.then(
      (value) => {
        bucket.settle(index);
        resolve(value);
      },
      (error: unknown) => {
        bucket.settle(index);
        reject(error);
      },
    );
  });
}

/**
 * Resolves after at least `ms` milliseconds (a number in [0, 2^53)), on the same 10 ms grid as
 * {@link timeout}. Resolves at once while paused for fork.
 */
export function sleep(ms: number): Promise<void> {
  try {
    validMs(ms);
  } catch (error) {
    return Promise.reject(error as Error);
  }
  if (paused) return Promise.resolve();
  const bucket = bucketFor(ms);
  return new Promise<void>((resolve) => bucket.addSleeper(resolve));
}

/**
 * An `AbortSignal` that aborts after at least `ms` milliseconds (a number in [0, 2^53)), with the
 * reason `AbortSignal.timeout` gives: a `DOMException` named `'TimeoutError'`. Cheaper than
 * `AbortSignal.timeout` because every call landing in the same 10 ms tick gets the same signal
 * (one `AbortController` per tick, not per call). Like `AbortSignal.timeout`, it does not keep the
 * process alive. Already aborted when returned while paused for fork. Throws for invalid `ms`.
 */
export function timeoutSignal(ms: number): AbortSignal {
  validMs(ms);
  if (paused) {
    return AbortSignal.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
  }
  return bucketFor(ms).signal();
}

/**
 * pingora-timeout's `pause_for_fork`: call right before `fork()` (from a native addon). Until
 * {@link unpause}, new `timeout`s time out, `sleep`s resolve and `timeoutSignal`s are aborted at
 * once; the native backend also stops its clock thread.
 */
export function pauseForFork(): void {
  paused = true;
  active.ticker.pauseForFork();
}

/** pingora-timeout's `unpause`: call right after `fork()`. */
export function unpause(): void {
  paused = false;
  active.ticker.unpause();
}
