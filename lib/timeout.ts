/**
 * Cheap timeouts in the style of pingora-timeout: deadlines are rounded UP to a 10 ms grid and every
 * waiter of one grid tick shares one bucket, armed once on the backend's {@link Ticker}. No
 * per-call timer, nothing to cancel when the promise wins (its entry is skipped when the tick
 * fires).
 *
 * `timeout` does not even read the clock: its waiters wait in a "fresh" list until the end of the
 * current event-loop turn (one `setImmediate` per turn), and only those still pending then are
 * given a deadline, counted from then and so never early. A promise that settles within the turn
 * (the common case) costs no clock read, bucket lookup or timer. Measured on the fallback:
 * `await timeout(resolved, 5000)` ~150 ns against ~50 ns for a bare `await` (it was ~265 ns with
 * an eager clock read and a ref flip per call); see benchmark/RESULTS.md.
 *
 * Pending `timeout`s and `sleep`s keep the process alive as `setTimeout` does; once none is
 * pending, nothing does. `timeoutSignal`s, like `AbortSignal.timeout`, do not keep it alive.
 *
 * @module
 */
import { active } from './backend.js';
import type { TickHandle } from './core.js';
import { invalidType, TimeoutError } from './errors.js';
import { millisecondsArgument } from './options.js';
import { setMaxListeners } from 'node:events';

/** Deadline granularity in milliseconds. */
const GRID_MS = 10;

/** A bucket's entries (two per waiter) below which compacting them is not worth a pass. */
const COMPACT_ENTRIES = 64;

/**
 * How many buckets there may be before one whose last waiter settles is dropped, its tick
 * cancelled, rather than kept until its deadline (see {@link Bucket.release}): 4,096 grid points,
 * 41 s of them. A kept idle bucket costs ~700 bytes natively and ~1,250 on the fallback (with
 * Node's timer list for its duration), so a caller passing distinct long durations (ms from a
 * request header) keeps at most ~3 MB and ~5 MB of them. Below the cap nothing is dropped: a
 * service calling `timeout(call, 5000)` at 1,000 requests a second fills ~500 grid points, and
 * its newest bucket goes idle between requests and gets waiters again; dropping it each time
 * cost a tick cancelled and armed again, a binding call or a `setTimeout` each, +1.3–1.9 µs a
 * call.
 */
const KEEP_BUCKETS = 4096;

/**
 * How near its deadline an idle bucket is kept even past {@link KEEP_BUCKETS}: its tick fires
 * within the second anyway, on an empty bucket, and a waiter of the same deadline still finds it.
 */
const KEEP_IDLE_MS = 1000;

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
   * Pairs of (segment, index): where a `timeout` waiter's triple lives in its {@link fresh}
   * segment, which still holds its reject function unless it settled.
   */
  private entries: unknown[] = [];
  private sleepers: (() => void)[] = [];
  private controller: AbortController | undefined;
  /** Entries and sleepers still waiting: the tick keeps the process alive while this is > 0. */
  private pending = 0;
  /** Whether the handle is ref'd now; lags `pending > 0` until {@link releaseIdle} runs. */
  private refd = true;
  /** Fired, or dropped before its deadline: its tick will not fire (again). */
  private fired = false;
  /** Whether {@link idle} holds this bucket already. */
  idleQueued = false;
  private readonly handle: TickHandle;

  constructor(readonly deadline: number) {
    // Armed ref'd: usually a waiter is added right away; if not, the idle check unrefs it.
    this.handle = active.ticker.arm(deadline, this.fire);
    idleSoon(this);
  }

  /** Takes over the pending `timeout` waiter at `segment[index]`. */
  adopt(segment: unknown[], index: number): void {
    this.hold();
    this.entries.push(segment, index);
  }

  /**
   * One adopted waiter settled before the tick. Its entry would stay until the tick fires, and with
   * it its segment: memory in proportion to calls × deadline (2M settled `timeout`s of 600 s held
   * 86 MB for ten minutes). So the entries go when nothing waits any more, and are compacted to the
   * waiting ones when those fall under an eighth: each compaction at least quarters them, so it
   * costs O(1) per entry overall. What stays is the entries still waiting and their segments (one
   * per event-loop turn, each as long as that turn's `timeout`s).
   *
   * With nothing waiting the bucket itself goes too once there are more than {@link KEEP_BUCKETS},
   * unless it gave out a signal or its deadline is near (see {@link KEEP_IDLE_MS}): kept, it and
   * its tick (a `setTimeout`, or the binding's registration) stayed until the deadline, so a caller
   * passing distinct long durations (ms from a request header) kept one per 10 ms grid point:
   * 50,000 settled `timeout`s of 1 h and more held 34 MB natively, 62 MB on the fallback. A waiter
   * that comes later for the same deadline makes a new bucket.
   */
  release(): void {
    const pending = --this.pending;
    if (pending === 0) {
      this.entries = [];
      if (
        buckets.size > KEEP_BUCKETS &&
        this.controller === undefined &&
        this.deadline - active.ticker.now() > KEEP_IDLE_MS
      ) {
        this.drop();
      } else {
        idleSoon(this);
      }
    } else if (this.entries.length >= COMPACT_ENTRIES && pending < this.entries.length >> 3) {
      this.compact();
    }
  }

  /** Forgets this bucket, which nothing waits on, and cancels its tick. */
  private drop(): void {
    buckets.delete(this.deadline);
    if (last === this) last = undefined;
    this.fired = true;
    this.handle.cancel();
  }

  /** Keeps only the entries whose waiter still waits (its reject function still in place). */
  private compact(): void {
    const entries = this.entries;
    const waiting: unknown[] = [];
    for (let i = 0; i < entries.length; i += 2) {
      const segment = entries[i] as unknown[];
      const index = entries[i + 1] as number;
      if (segment[index] !== undefined) waiting.push(segment, index);
    }
    this.entries = waiting;
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
      const segment = entries[i] as unknown[];
      const index = entries[i + 1] as number;
      const reject = segment[index] as ((reason: unknown) => void) | undefined;
      if (reject !== undefined) {
        segment[index] = undefined;
        reject(new TimeoutError(segment[index + 1] as number));
      }
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

/** The first grid point at least `ms` after `now`. */
const gridDeadline = (now: number, ms: number): number => Math.ceil((now + ms) / GRID_MS) * GRID_MS;

function bucketFor(ms: number): Bucket {
  return bucketAt(gridDeadline(active.ticker.now(), ms));
}

function bucketAt(deadline: number): Bucket {
  if (last !== undefined && last.deadline === deadline) return last;
  let bucket = buckets.get(deadline);
  if (bucket === undefined) {
    bucket = new Bucket(deadline);
    buckets.set(deadline, bucket);
  }
  last = bucket;
  return bucket;
}

/**
 * `timeout` waiters of this event-loop turn, as triples (reject or `undefined` once settled or
 * fired, ms, the adopting {@link Bucket} once flushed). A segment is replaced, never cleared, at
 * each flush: waiters keep a reference to theirs and find their triple by index.
 */
let fresh: unknown[] = [];
let flushScheduled = false;

/**
 * Gives every still-pending fresh waiter its deadline, from one clock read taken now (after the
 * waiters were created, so never early), and its bucket.
 */
function flush(): void {
  flushScheduled = false;
  const segment = fresh;
  if (segment.length === 0) return;
  fresh = [];
  const now = active.ticker.now();
  let bucket: Bucket | undefined;
  for (let i = 0; i < segment.length; i += 3) {
    if (segment[i] === undefined) continue;
    const deadline = gridDeadline(now, segment[i + 1] as number);
    if (bucket?.deadline !== deadline) bucket = bucketAt(deadline);
    bucket.adopt(segment, i);
    segment[i + 2] = bucket;
  }
}

/**
 * The waiter whose reject function is `reject`, at `segment[index]`, settled first: forget it, or
 * tell its bucket. The identity check makes a second call harmless: a thenable may call its
 * callbacks twice, and by then the slot may hold the waiter of another caller (slots are reused).
 */
function settle(segment: unknown[], index: number, reject: unknown): void {
  if (segment[index] !== reject) return;
  const bucket = segment[index + 2] as Bucket | undefined;
  if (bucket !== undefined) {
    segment[index] = undefined;
    bucket.release();
  } else if (index === segment.length - 3) {
    // Sequential awaits reuse one slot. pop(), not `length =`: the setter is a runtime call.
    segment.pop();
    segment.pop();
    segment.pop();
  } else {
    segment[index] = undefined;
  }
}

/** The longest duration: 2^53 - 1 ms. */
const MAX_MS = Number.MAX_SAFE_INTEGER;

/** The intrinsic `then`: a `promise` that has it is a native promise (or a throwing Proxy of one). */
const promiseThen = Promise.prototype.then;

function validMs(ms: unknown): number {
  return millisecondsArgument('The "ms" argument', ms, MAX_MS);
}

/**
 * Settles as `promise` does, or rejects with a {@link TimeoutError} (`ERR_KEEPCOUNT_TIMEOUT`) if
 * `ms` milliseconds (a number in [0, 2^53)) pass first. Never times out early: `ms` is counted
 * from the end of the current event-loop turn and the deadline rounded up to the next 10 ms grid
 * point, so it fires at most about one tick (plus event-loop delay, including what is left of
 * this turn) late. Invalid arguments reject with `ERR_INVALID_ARG_TYPE` / `ERR_OUT_OF_RANGE`.
 *
 * While paused for fork ({@link pauseForFork}) it times out at once unless `promise` is already
 * settled, as pingora-timeout does.
 */
export function timeout<T>(promise: PromiseLike<T>, ms: number): Promise<T> {
  // `then` is read once, as `Promise.resolve` does: a getter may throw or answer differently.
  let then: unknown;
  try {
    then = promise?.then;
  } catch (error) {
    return Promise.reject(error as Error);
  }
  // The common case checked inline; invalidTimeout builds the exact errors.
  if (!(typeof ms === 'number' && ms >= 0 && ms <= MAX_MS) || typeof then !== 'function') {
    return invalidTimeout(promise, ms);
  }
  if (paused) {
    return new Promise<T>((resolve, reject) => {
      // Not `resolve` itself, a native promise's `then` included: handed a thenable (an object a
      // native promise fulfilled with may have become one since), it would lock this promise to
      // it, unbounded. A waiter of its own, never given a bucket, tells `follow` when to stop.
      const waiter = [reject, ms, undefined];
      follow(promise, then as PromiseLike<T>['then'], waiter, 0, resolve, reject);
      queueMicrotask(() => {
        settle(waiter, 0, reject);
        reject(new TimeoutError(ms));
      });
    });
  }
  // The executor's closure shares its context with the two handlers below. A static executor
  // storing the resolving functions into a module object (tried) saves the closure but pays a
  // write barrier per store into that long-lived object: 1,975 against 1,755 instructions per
  // `await timeout(resolved, 5000)` (callgrind, `node --predictable`, native backend; a bare
  // await 642, new Promise + then 1,262).
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const out = new Promise<T>((fulfil, fail) => {
    resolve = fulfil;
    reject = fail;
  });
  const segment = fresh;
  const index = segment.push(reject, ms, undefined) - 3;
  if (!flushScheduled) {
    // Ref'd like any immediate: keeps the process alive until the waiters have their bucket.
    flushScheduled = true;
    setImmediate(flush);
  }
  if (then !== promiseThen) {
    follow(promise, then as PromiseLike<T>['then'], segment, index, resolve, reject);
    return out;
  }
  // A native promise calls one handler once: its handlers need no guard. It adopts a thenable
  // itself, but an object it was fulfilled with may have become one since (`then` added after, or
  // a getter answering otherwise on a later read: a review found such a timeout never settling),
  // so an object goes through resolveWaiter's one `then` read too. A primitive, the usual value,
  // costs one `typeof`. They are closures of the same context as the executor.
  try {
    (then as PromiseLike<T>['then']).call(
      promise,
      (value) => {
        if ((typeof value === 'object' && value !== null) || typeof value === 'function') {
          resolveWaiter(value, segment, index, resolve, reject);
          return;
        }
        settle(segment, index, reject);
        resolve(value);
      },
      (error: unknown) => {
        settle(segment, index, reject);
        reject(error);
      },
    );
  } catch (error) {
    // A `then` refusing its receiver (a Proxy of a promise): rejects, and no waiter stays armed.
    settle(segment, index, reject);
    reject(error);
  }
  return out;
}

/**
 * Calls `then` on `thenable` with resolving functions for the waiter at `segment[index]`, as
 * `Promise.resolve(thenable)` does (the spec's NewPromiseResolveThenableJob, run at once rather
 * than as a job): only the first call of either counts, a throw after it is ignored, and a thenable
 * they are handed is followed the same way (see {@link resolveWaiter}) with the waiter still armed.
 * Handing `resolve` such a value instead would lock the result to it, unbounded by the timeout.
 */
function follow<T>(
  thenable: unknown,
  then: PromiseLike<T>['then'],
  segment: unknown[],
  index: number,
  resolve: (value: T) => void,
  reject: (reason: unknown) => void,
): void {
  let called = false;
  try {
    then.call(
      thenable,
      (value) => {
        if (called) return;
        called = true;
        resolveWaiter(value, segment, index, resolve, reject);
      },
      (error: unknown) => {
        if (called) return;
        called = true;
        settle(segment, index, reject);
        reject(error);
      },
    );
  } catch (error) {
    // As `Promise.resolve(thenable)` does: a throwing `then` rejects, and no waiter stays armed.
    if (called) return;
    called = true;
    settle(segment, index, reject);
    reject(error);
  }
}

/**
 * The spec's promise resolve function for a waiter: a value with a callable `then` (read once: a
 * getter may throw or answer differently) is followed, anything else fulfils; nothing is done once
 * the waiter timed out. (A `then` getter that answers `undefined` here and a function to the read
 * `resolve` makes next still locks the result to it: no reading of a value can prevent that.) A value that is the returned promise itself, which `resolve` would refuse
 * with a TypeError, is followed too and times out: that promise cannot settle first.
 */
function resolveWaiter<T>(
  value: T,
  segment: unknown[],
  index: number,
  resolve: (value: T) => void,
  reject: (reason: unknown) => void,
): void {
  // Timed out (or settled) already: following further would only call user code for nothing, and
  // keep a thenable chain that never ends going for ever.
  if (segment[index] !== reject) return;
  if ((typeof value === 'object' && value !== null) || typeof value === 'function') {
    let then: unknown;
    try {
      then = (value as { then?: unknown }).then;
    } catch (error) {
      settle(segment, index, reject);
      reject(error);
      return;
    }
    if (typeof then === 'function') {
      follow(value, then as PromiseLike<T>['then'], segment, index, resolve, reject);
      return;
    }
  }
  settle(segment, index, reject);
  resolve(value);
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
 * reason `AbortSignal.timeout` gives: a `DOMException` named `'TimeoutError'`. Like
 * `AbortSignal.timeout`, it does not keep the process alive. Already aborted when returned while
 * paused for fork. Throws for invalid `ms`.
 *
 * **The signal is shared**: every call landing in the same 10 ms tick gets the same one (one
 * `AbortController` per tick, not per call), which is what makes it ~80 ns where
 * `AbortSignal.timeout` takes microseconds. So never assign its `onabort` (it replaces another
 * caller's), never call `stopImmediatePropagation()` in a listener (it starves the other callers'
 * listeners, a `fetch`'s included), attach no state to it, and remove listeners once done (they
 * stay until the tick otherwise). A per-call signal (`AbortSignal.any([shared])`, tried) cost
 * 9–14 µs, as much as `AbortSignal.timeout`: give one to code that might misuse the shared one.
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
  // Waiters of this turn get their deadlines while the clock machinery still runs.
  flush();
  paused = true;
  active.ticker.pauseForFork();
}

/** pingora-timeout's `unpause`: call right after `fork()`. */
export function unpause(): void {
  paused = false;
  active.ticker.unpause();
}
