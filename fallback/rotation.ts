/**
 * The two-slot interval clock of `Rate` and `HeavyHitters` (crates/limits/src/rotation.rs,
 * single-threaded): one slot counts the current interval, the other holds the previous one, and
 * they trade places on the first call at least one interval after the last start. Where pingora
 * panics (a clock before the last start) this counts no time as passed.
 */
export class Rotation<T extends { reset(): void }> {
  /** Elapsed ms (the caller's time base) of the last start. */
  private lastReset = 0;

  constructor(
    private readonly intervalMs: number,
    /** The slot counting the current interval. */
    public current: T,
    /** The slot holding the previous interval. */
    public previous: T,
  ) {}

  /** Starts a new interval if the current one ended; returns ms since the last start before it. */
  maybeReset(nowMs: number): number {
    const past = Math.max(0, nowMs - this.lastReset);
    if (past < this.intervalMs) return past;
    const stale = this.previous;
    stale.reset();
    this.previous = this.current;
    this.current = stale;
    // Two intervals or more: what was current is stale too.
    if (past >= this.intervalMs * 2) this.previous.reset();
    this.lastReset = nowMs;
    return past;
  }
}
