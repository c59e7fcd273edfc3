/**
 * What an `Estimator`, `Rate`, `Inflight` or `Limiter` holds once closed: a core whose every call throws
 * `ERR_KEEPCOUNT_CLOSED`. Swapping it in costs the open object's calls nothing (no flag to test on
 * the hot path), and the closed object keeps answering its shape.
 */
import type { EstimatorCore, HeavyCore, LimiterCore, OwnedInflightCore, RateCore, SharedLimiterCore } from './core.js';
import { withCode, type KeepcountError } from './errors.js';

/** `Symbol.dispose` where the runtime has it (Node >= 20.4), else the symbol TypeScript's `using` looks up. */
export const dispose: typeof Symbol.dispose = Symbol.dispose ?? Symbol.for('Symbol.dispose');

/** The stand-ins below, so `merge` can refuse a closed sketch as its argument too. */
const standIns = new WeakSet<object>();

/** Whether `core` is a closed object's stand-in. */
export const isClosed = (core: object): boolean => standIns.has(core);

export function closedError(what: string): KeepcountError {
  return withCode(new Error(`This ${what} was closed; its counters are gone`), 'ERR_KEEPCOUNT_CLOSED');
}

/** A stand-in for a closed sketch `core`: its shape and seed, and a thrown error for anything else. */
export function closedEstimator(core: EstimatorCore): EstimatorCore {
  const fail = (): never => {
    throw closedError('Estimator');
  };
  const standIn: EstimatorCore = {
    hashes: core.hashes,
    slots: core.slots,
    seed: core.seed,
    incr: fail,
    get: fail,
    counterIndexes: fail,
    reset: fail,
    merge: fail,
    serialize: fail,
    close: () => {},
  };
  standIns.add(standIn);
  return standIn;
}

/** A stand-in for a closed rate: every call throws. */
export function closedRate(): RateCore {
  const fail = (): never => {
    throw closedError('Rate');
  };
  const standIn: RateCore = {
    observe: fail,
    observeInWindow: fail,
    refund: fail,
    previousCount: fail,
    sample: fail,
    close: () => {},
  };
  standIns.add(standIn);
  return standIn;
}

/** A stand-in for a closed `Inflight`'s counters: every call throws. */
export function closedInflight(): OwnedInflightCore {
  const fail = (): never => {
    throw closedError('Inflight');
  };
  const standIn: OwnedInflightCore = { incr: fail, get: fail, close: () => {} };
  standIns.add(standIn);
  return standIn;
}

/** A stand-in for a closed limiter's buckets: every call throws, `size` too. */
export function closedLimiter(): LimiterCore {
  const fail = (): never => {
    throw closedError('Limiter');
  };
  const standIn: LimiterCore = {
    check: fail,
    replaceKeys: fail,
    setQuota: fail,
    setBestEffort: fail,
    setOverall: fail,
    quota: fail,
    get size(): number {
      return fail();
    },
    close: () => {},
  };
  standIns.add(standIn);
  return standIn;
}

/** A stand-in for a closed shared limiter: every call throws. */
export function closedSharedLimiter(): SharedLimiterCore {
  const fail = (): never => {
    throw closedError('Limiter');
  };
  const standIn: SharedLimiterCore = { check: fail, stats: fail, close: () => {} };
  standIns.add(standIn);
  return standIn;
}

/** A stand-in for closed heavy hitters: every call throws. */
export function closedHeavy(): HeavyCore {
  const fail = (): never => {
    throw closedError('HeavyHitters');
  };
  const standIn: HeavyCore = {
    incr: fail,
    incrInWindow: fail,
    intervalElapsed: fail,
    decr: fail,
    count: fail,
    top: fail,
    stats: fail,
    serialize: fail,
    absorb: fail,
    close: () => {},
  };
  standIns.add(standIn);
  return standIn;
}
