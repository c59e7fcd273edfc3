/**
 * The cases of a suite timed side by side: each in turn for a short slice of time, round after
 * round, so that every round holds one slice of each case taken within a second or two of the
 * others. A ratio of two cases is then the median over rounds of their ratio within the round.
 *
 * Why: benny times each case for about half a second before moving on to the next, so two cases
 * of a suite are seconds apart, and this shared VM's speed drifts by up to 2× over minutes. Ratios
 * taken from benny's medians flipped verdicts between full runs on code that had not changed
 * (`Inflight.enter` + `leave` over its floor 1.11× in one run, 1.68× in the next; the Fastify
 * store 1.08× cheaper than @fastify/rate-limit's `LocalStore` in one, 0.81× in the next). Slices a
 * few tens of milliseconds long put both sides of a ratio in the same spell of the machine.
 */
import type { Case } from './case.js';

export interface SideBySideOptions {
  /** Rounds measured (after `warmUpRounds` more that are not). */
  rounds: number;
  /** Milliseconds each case runs per round. */
  sliceMs: number;
  /** Rounds run first and dropped: the JIT finishes compiling every case's loop there. */
  warmUpRounds: number;
}

/** Per case (in `cases`' order), the ns per operation of each measured round. */
export async function sideBySide(cases: Case[], options: SideBySideOptions): Promise<number[][]> {
  const { rounds, sliceMs, warmUpRounds } = options;
  const perCase = cases.map(() => [] as number[]);
  for (let round = -warmUpRounds; round < rounds; round++) {
    // Rotated like benny's rounds: no case always follows the same neighbour's garbage.
    for (let k = 0; k < cases.length; k++) {
      const i = (k + Math.max(0, round)) % cases.length;
      const ns = await slice(cases[i]!, sliceMs);
      if (round >= 0) perCase[i]!.push(ns);
    }
  }
  return perCase;
}

/** Runs `c` for at least `ms` and returns its ns per operation. */
async function slice(c: Case, ms: number): Promise<number> {
  const start = performance.now();
  for (let calls = 1; ; calls++) {
    const result = c.run();
    // Async cases' batches return a promise; sync ones are not awaited (a microtask per batch).
    if (result instanceof Promise) await result;
    const elapsed = performance.now() - start;
    if (elapsed >= ms) return (elapsed * 1e6) / (calls * c.batch);
  }
}

/** The median of `xs` (the mean of the middle two for an even count). */
export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** The median over rounds of `a`'s time over `b`'s in the same round. */
export function pairedRatio(a: number[], b: number[]): number {
  if (a.length !== b.length || a.length === 0) throw new Error('paired rounds differ in number');
  return median(a.map((x, r) => x / b[r]!));
}
