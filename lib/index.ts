/**
 * keepcount: count-min sketch estimators, rate and in-flight limits, and cheap timeouts, on a Rust
 * core with a bit-identical pure-TypeScript fallback.
 *
 * @module
 */
import { active } from './backend.js';
import type { BackendName } from './core.js';

export type { BackendName, Key } from './core.js';
export { ManualClock, type Clock } from './clock.js';
export { TimeoutError, type ErrorCode, type KeepcountError } from './errors.js';
export {
  Estimator,
  type ErrorBoundsOptions,
  type EstimatorOptions,
  type SharedBufferEstimatorOptions,
  type SharedEstimatorOptions,
} from './estimator.js';
export {
  HeavyHitters,
  type HeavyHittersOptions,
  type HeavyStats,
  type HeavyTalker,
  type HeavyWindowName,
  type KeyCount,
  type Standing,
} from './heavy.js';
export {
  Inflight,
  type InflightCounter,
  type InflightGuard,
  type InflightOptions,
  type SharedInflightOptions,
} from './inflight.js';
export {
  Limiter,
  type LimitInfo,
  type LimiterDecision,
  type LimiterOptions,
  type Quota,
  type QuotaInfo,
  type RateLimit,
} from './limiter.js';
export {
  proportionalRate,
  Rate,
  type FromSharedBufferRateOptions,
  type RateComponents,
  type RateOptions,
  type SharedBufferRateOptions,
  type SharedRateOptions,
} from './rate.js';
export type { SharedCreation, SharedPlacement } from './shared.js';
export { SharedLimiter, type SharedLimiterOptions, type SharedLimiterStats } from './shared-limiter.js';
export { pauseForFork, sleep, timeout, timeoutSignal, unpause } from './timeout.js';

/** Which implementation this process runs: the Rust core (`'native'`) or the TypeScript fallback. */
export const backend: BackendName = active.name;
