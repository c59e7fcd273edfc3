/**
 * The measure of a token bucket's overshoot bound over every window: what the SyncedLimiter specs
 * hold the fleet's admissions to.
 */

/**
 * The most admissions in any window above `rate × t`: max over i ≤ j of `(j − i + 1) − rate ×
 * (times[j] − times[i])` over the sorted admission times, in one pass.
 */
export function worstExcess(times: number[], ratePerMs: number): number {
  let best = 0;
  let lowest = Infinity;
  times.forEach((at, j) => {
    // Window from admission i to j: (j − i + 1) − rate × (at − t_i) = (j + 1 − rate × at) − (i − rate × t_i).
    lowest = Math.min(lowest, j - ratePerMs * at);
    best = Math.max(best, j + 1 - ratePerMs * at - lowest);
  });
  return best;
}
