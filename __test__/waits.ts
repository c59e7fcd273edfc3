/**
 * Waiting for the state a test needs instead of sleeping a fixed time. On this shared 2-core
 * machine (ava runs two spec files at once) a timer such as a sync period or a staleness threshold
 * can fire hundreds of milliseconds late, so a test that sleeps "long enough" for one fails now
 * and then. These poll for the state itself, up to a deadline far past any delay seen here, and
 * fail naming what never happened.
 */
import type { RedisSync } from '../lib/redis/index.js';

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Resolves once at least `ms` milliseconds have passed on the host's monotonic clock (the default
 * clock of `Rate`, `HeavyHitters` and `Limiter`) since `since`, a `process.hrtime.bigint()`
 * reading: timers fire on the event loop's cached time and may run a little early by that clock.
 */
export async function hostClockPassed(since: bigint, ms: number): Promise<void> {
  while (process.hrtime.bigint() - since < BigInt(ms) * 1_000_000n) await sleep(20);
}

/** How long {@link until} waits by default: far past any event-loop delay seen on this machine. */
const DEADLINE_MS = 10_000;

/**
 * How often {@link until} asks again: a condition may read thousands of keys, and asked too often
 * it would starve the very syncs it waits for.
 */
const POLL_MS = 20;

/**
 * Resolves once `condition()` holds, asking every few milliseconds; rejects with `never: <what>`
 * after `timeoutMs`. An async condition (e.g. `() => sync.flush()`) is awaited before asking again.
 */
export async function until(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = DEADLINE_MS,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > deadline) throw new Error(`never within ${timeoutMs} ms: ${what}`);
    await sleep(POLL_MS);
  }
}

/**
 * Resolves once `sync` has completed `count` successful syncs that all began after this call,
 * whether its timer or a flush started them. Without `cluster` syncs never overlap (a flush joins
 * the one under way), so the first to complete after the call may have begun before it, and every
 * later one began after the one before it ended: `count + 1` completions. In a cluster a sync can
 * begin while another waits on a hung master's call, so two may have begun before: `count + 2`.
 * Only syncs that carry something count (a `RedisSync` with no structure skips Redis and counts none).
 */
export function syncsAfterNow(sync: RedisSync, count: number, what: string): Promise<void> {
  const target = sync.stats.syncs + count + (sync.cluster ? 2 : 1);
  return until(() => sync.stats.syncs >= target, what);
}
