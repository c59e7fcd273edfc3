/** The pure-TypeScript backend: same API and bit-identical results as the native one. */
import type { Backend } from '../lib/core.js';
import { AtomicEstimator, BufferRate } from './buffer.js';
import { FallbackEstimator } from './estimator.js';
import { FallbackHeavy } from './heavy/index.js';
import { FallbackLimiter } from './limiter.js';
import { FallbackRate } from './rate.js';
import { fallbackTicker } from './ticker.js';
import { decode } from './wire.js';

/** The fallback {@link Backend}. */
export const fallbackBackend: Backend = {
  name: 'fallback',
  Estimator: FallbackEstimator,
  deserializeEstimator(bytes) {
    const d = decode(bytes);
    return typeof d === 'string' ? d : new FallbackEstimator(d.hashes, d.slots, d.seed, d.counters);
  },
  Rate: FallbackRate,
  Limiter: FallbackLimiter,
  Heavy: FallbackHeavy,
  ticker: fallbackTicker,
  shared: null,
  buffers: {
    estimator: (counters, hashes, slots, seed) => new AtomicEstimator(hashes, slots, seed, counters),
    rate: (counters, intervalMs, hashes, slots, seed) => new BufferRate(counters, intervalMs, hashes, slots, seed),
  },
};
