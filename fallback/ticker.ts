/**
 * The fallback tick source: `setTimeout` per distinct deadline, re-checked against
 * `performance.now()` when it fires because Node's timers measure from the event loop's cached
 * clock and can fire up to the age of that cache early.
 */
import type { TickHandle, Ticker } from '../lib/core.js';

/** Node clamps longer delays to 1 ms; longer waits are taken in steps. */
const MAX_DELAY = 2147483647;

const now = (): number => performance.now();

/** How often a due tick looks again while paused for fork: the native clock thread's tick. */
const PAUSED_RETRY_MS = 10;

/** Whether this thread is paused for fork: due ticks wait for the unpause. */
let paused = false;

class Tick implements TickHandle {
  private timer: NodeJS.Timeout;
  private keepAlive = true;

  constructor(
    private readonly deadlineMs: number,
    private readonly fire: () => void,
  ) {
    this.timer = this.schedule();
  }

  ref(): void {
    if (!this.keepAlive) {
      this.keepAlive = true;
      this.timer.ref();
    }
  }

  unref(): void {
    if (this.keepAlive) {
      this.keepAlive = false;
      this.timer.unref();
    }
  }

  cancel(): void {
    // A cleared timer never calls `check`, which alone reschedules; ref/unref of it do nothing.
    clearTimeout(this.timer);
  }

  private schedule(): NodeJS.Timeout {
    const left = this.deadlineMs - now();
    const delay = paused && left <= 0 ? PAUSED_RETRY_MS : Math.min(MAX_DELAY, Math.max(1, Math.ceil(left)));
    const timer = setTimeout(this.check, delay);
    if (!this.keepAlive) timer.unref();
    return timer;
  }

  private readonly check = (): void => {
    if (now() >= this.deadlineMs && !paused) this.fire();
    else this.timer = this.schedule();
  };
}

/**
 * The fallback {@link Ticker}. Pausing for fork has nothing to protect here (no clock thread, no
 * locks), but ticks that come due while paused wait for the unpause, as the native clock
 * thread's do, and fire at most one retry (10 ms) after it, keeping the process alive meanwhile
 * if they are ref'd. Unlike the native pause, which is the whole process's, it is this thread's:
 * other threads' ticks run on.
 */
export const fallbackTicker: Ticker = {
  now,
  arm: (deadlineMs, fire) => new Tick(deadlineMs, fire),
  pauseForFork: () => {
    paused = true;
  },
  unpause: () => {
    paused = false;
  },
};
