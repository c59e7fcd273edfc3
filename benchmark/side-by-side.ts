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
 *
 * Garbage: a slice that allocates leaves young objects behind, and whichever slice comes next
 * paid to collect them when the order only rotated, so that every case always followed the same
 * neighbour: `KeepcountStore.increment` always came after express-rate-limit's `MemoryStore`,
 * which allocates a client record per new key, and read 1,484 ns side by side against 1,255 by
 * benny, whose cases run half a second each (2026-11-28 09:23). So each round runs the cases in
 * a fresh order (seeded: runs repeat), and with `--expose-gc` every slice ends with a
 * young-generation collection timed as its own: each case pays for the young garbage it left,
 * the next one starts with none (the same suite then: 1,007 side by side, 1,166 by benny; the
 * `MemoryStore` 2,019 and 1,969).
 *
 * Timers: the event loop turns after every slice, outside its timing. Slices of sync cases never
 * yield and async ones await settled promises, so without that turn no timer fired in a whole
 * suite: `RateLimiterMemory`'s per-key expiry timers never removed a key, its store grew with
 * every key of the suite and the collector charged that to whoever allocated, and
 * `MemoryStore`'s window never rolled. rate-limiter-flexible read 2,842 ns side by side against
 * 2,161 by benny, whose cycles yield (2026-11-29 01:27), which made keepcount's ratios over it
 * 15–25 % better than a server, where each request is a turn of its own, would see them. A
 * timer's callback now runs in that turn, so its own work is timed for no case: that favours the
 * peers that keep timers, never keepcount.
 */
import type { Case } from './case.js';
import { prng } from './data.js';

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
  const random = prng(cases.length);
  const collectYoung = youngCollector();
  collectYoung?.();
  for (let round = -warmUpRounds; round < rounds; round++) {
    for (const i of shuffled(cases.length, random)) {
      const ns = await slice(cases[i]!, sliceMs, collectYoung);
      if (round >= 0) perCase[i]!.push(ns);
      await turn();
    }
  }
  return perCase;
}

/**
 * Runs `c` for at least `ms`, then `collectYoung` (if any) on its clock, and returns its ns per
 * operation.
 */
async function slice(c: Case, ms: number, collectYoung: (() => void) | undefined): Promise<number> {
  const start = performance.now();
  for (let calls = 1; ; calls++) {
    const result = c.run();
    // Async cases' batches return a promise; sync ones are not awaited (a microtask per batch).
    if (result instanceof Promise) await result;
    if (performance.now() - start >= ms) {
      collectYoung?.();
      return ((performance.now() - start) * 1e6) / (calls * c.batch);
    }
  }
}

/** One turn of the event loop: timers due run, then `setImmediate` callbacks. */
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A young-generation collection (a scavenge), if the process runs with `--expose-gc`. */
function youngCollector(): (() => void) | undefined {
  const gc = (globalThis as { gc?: (options: { type: 'minor' }) => void }).gc;
  return gc === undefined ? undefined : () => gc({ type: 'minor' });
}

/** The indexes `0 … n − 1` in an order drawn from `random` (Fisher–Yates). */
function shuffled(n: number, random: () => number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
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
