/**
 * The fallback tick source: `setTimeout` per distinct deadline, re-checked against
 * `performance.now()` when it fires because Node's timers measure from the event loop's cached
 * clock and can fire up to the age of that cache early.
 */
import type { TickHandle, Ticker } from '../lib/core.js';

/** Node clamps longer delays to 1 ms; longer waits are taken in steps. */
const MAX_DELAY = 2147483647;

const now = (): number => performance.now();

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

  private schedule(): NodeJS.Timeout {
    const delay = Math.min(MAX_DELAY, Math.max(1, Math.ceil(this.deadlineMs - now())));
    const timer = setTimeout(this.check, delay);
    if (!this.keepAlive) timer.unref();
    return timer;
  }

  private readonly check = (): void => {
    if (now() >= this.deadlineMs) this.fire();
    else this.timer = this.schedule();
  };
}

/**
 * The fallback {@link Ticker}. Pausing for fork has nothing to protect here (no clock thread, no
 * locks), so `pauseForFork`/`unpause` leave armed ticks running.
 */
export const fallbackTicker: Ticker = {
  now,
  arm: (deadlineMs, fire) => new Tick(deadlineMs, fire),
  pauseForFork: () => {},
  unpause: () => {},
};
