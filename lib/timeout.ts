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

/**
 * The waiters of one grid tick.
 *
 * Keep-alive is released lazily: when the last waiter settles, the tick is unref'd from a
 * `setImmediate`, once per turn of the event loop, not on the spot. A loop of `await timeout(…)`
 * otherwise flips the tick's ref twice per call, and each flip is a binding call (`Timeout#ref` on
 * the fallback, the threadsafe function's ref on the native backend) costing as much as the rest
 * of `timeout`. The process still exits in the same turn the last waiter settles.
 */
class Bucket {
  /**
   * Pairs of (reject or `undefined` once the promise settled, ms asked for). An entry that settles
   * while it is the last one is popped, so sequential awaits reuse one slot instead of growing it.
   */
  private entries: unknown[] = [];
  private sleepers: (() => void)[] = [];
  private controller: AbortController | undefined;
  /** Entries and sleepers still waiting: the tick keeps the process alive while this is > 0. */
  private pending = 0;
  /** Whether the handle is ref'd now; lags `pending > 0` until {@link releaseIdle} runs. */
  private refd = true;
  private fired = false;
  /** Whether {@link idle} holds this bucket already. */
  idleQueued = false;
  private readonly handle: TickHandle;

  constructor(readonly deadline: number) {
    // Armed ref'd: usually a waiter is added right away; if not, the idle check unrefs it.
    this.handle = active.ticker.arm(deadline, this.fire);
    idleSoon(this);
  }

  /** Adds a `timeout` waiter; returns its index for {@link settle}. */
  addTimeout(reject: (reason: unknown) => void, ms: number): number {
    this.hold();
    return this.entries.push(reject, ms) - 2;
  }

  /** The `timeout` waiter at `index` lost interest: its promise settled first. */
  settle(index: number): void {
    const entries = this.entries;
    if (entries[index] === undefined) return;
    if (index === entries.length - 2) {
      // pop(), not `length =`: the length setter is a runtime call, pop() is inlined.
      entries.pop();
      entries.pop();
    } else {
      entries[index] = undefined;
    }
    if (--this.pending === 0) idleSoon(this);
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

  /** Unrefs the tick if nothing waits on it any more (see the class documentation). */
  releaseIdle(): void {
    this.idleQueued = false;
    if (this.pending === 0 && this.refd && !this.fired) {
      this.refd = false;
      this.handle.unref();
    }
  }

  private hold(): void {
    if (this.pending++ === 0 && !this.refd) {
      this.refd = true;
      this.handle.ref();
    }
  }

  private readonly fire = (): void => {
    buckets.delete(this.deadline);
    if (last === this) last = undefined;
    const { entries, sleepers, controller } = this;
    this.entries = [];
    this.sleepers = [];
    this.pending = 0;
    this.fired = true;
    for (let i = 0; i < entries.length; i += 2) {
      const reject = entries[i] as ((reason: unknown) => void) | undefined;
      if (reject !== undefined) reject(new TimeoutError(entries[i + 1] as number));
    }
    for (const resolve of sleepers) resolve();
    controller?.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
  };
}

/** Buckets whose last waiter settled this turn; {@link releaseIdleBuckets} unrefs them. */
const idle: Bucket[] = [];

function idleSoon(bucket: Bucket): void {
  if (bucket.idleQueued) return;
  bucket.idleQueued = true;
  if (idle.length === 0) setImmediate(releaseIdleBuckets);
  idle.push(bucket);
}

function releaseIdleBuckets(): void {
  const due = idle.splice(0);
  for (const bucket of due) bucket.releaseIdle();
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

/** The longest duration: 2^53 - 1 ms. */
const MAX_MS = Number.MAX_SAFE_INTEGER;

function validMs(ms: unknown): number {
  return millisecondsArgument('The "ms" argument', ms, MAX_MS);
}

/**
 * Where {@link capture} leaves the resolving functions of the promise it executes for: a static
 * executor saves `timeout` allocating one closure (and its context) per call.
 */
const captured: { resolve: (value: never) => void; reject: (reason: unknown) => void } = {
  resolve: () => {},
  reject: () => {},
};

function capture(resolve: (value: never) => void, reject: (reason: unknown) => void): void {
  captured.resolve = resolve;
  captured.reject = reject;
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
  // The common case checked inline; invalidTimeout builds the exact errors.
  if (!(typeof ms === 'number' && ms >= 0 && ms <= MAX_MS) || typeof promise?.then !== 'function') {
    return invalidTimeout(promise, ms);
  }
  if (paused) {
    return new Promise<T>((resolve, reject) => {
      promise.then(resolve, reject);
      queueMicrotask(() => reject(new TimeoutError(ms)));
    });
  }
  const bucket = bucketFor(ms);
  const out = new Promise<T>(capture);
  const resolve = captured.resolve as (value: T) => void;
  const reject = captured.reject;
  const index = bucket.addTimeout(reject, ms);
  // The only per-call closures: one context shared by both handlers, no executor closure.
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
  return out;
}

function invalidTimeout<T>(promise: unknown, ms: unknown): Promise<T> {
  try {
    validMs(ms);
    throw invalidType('The "promise" argument', 'a promise or thenable', promise);
  } catch (error) {
    return Promise.reject(error as Error);
  }
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
