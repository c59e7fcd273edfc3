import { ForwardTime, READ_WALL_CLOCK, Stopwatch, wallReadingMs } from '../lib/clock.js';

/**
 * The two-slot interval clock of `Rate` and `HeavyHitters` (crates/limits/src/rotation.rs,
 * single-threaded): one slot counts the current interval, the other holds the previous one, and
 * they trade places on the first call at least one interval after the last start. Where pingora
 * panics (a clock before the last start) this counts no time as passed.
 */
export class Rotation<T extends { reset(): void }> {
  /** Elapsed ms (the caller's time base) of the last start. */
  private lastReset = 0;
  /**
   * With a host clock (`hostClock` of `RateCoreConstructor`): whole ms since construction on the
   * host's monotonic clock, read here in place of the `nowMs` the caller passes, as the native
   * core's `CallerClock::host` does.
   */
  private readonly host: Stopwatch | undefined;
  /**
   * With a wall origin (`wallOriginMs` of `RateCoreConstructor`): `nowMs` is a wall reading from
   * `originMs`, or {@link READ_WALL_CLOCK} to read `Date.now()` here, as the native core reads the
   * wall clock itself; time is the readings' forward steps, as `CallerClock::with_wall_origin`
   * counts them.
   */
  private readonly wall: { originMs: number; time: ForwardTime } | undefined;

  constructor(
    private readonly intervalMs: number,
    /** The slot counting the current interval. */
    public current: T,
    /** The slot holding the previous interval. */
    public previous: T,
    hostClock = false,
    wallOriginMs?: number,
  ) {
    this.host = hostClock ? new Stopwatch(undefined) : undefined;
    // The origin is the reading 0.
    this.wall = wallOriginMs === undefined ? undefined : { originMs: wallOriginMs, time: new ForwardTime(0) };
  }

  /**
   * Starts a new interval if the current one ended; returns ms since the last start before it.
   * `nowMs` is the caller's reading, ignored with a host clock.
   */
  maybeReset(nowMs: number): number {
    const wall = this.wall;
    const now =
      this.host !== undefined
        ? Math.floor(this.host.elapsedMs())
        : wall !== undefined
          ? // Object.is: the sentinel is NaN, which === never matches.
            wall.time.advance(Object.is(nowMs, READ_WALL_CLOCK) ? wallReadingMs(wall.originMs, Date.now()) : nowMs)
          : nowMs;
    const past = Math.max(0, now - this.lastReset);
    if (past < this.intervalMs) return past;
    const stale = this.previous;
    stale.reset();
    this.previous = this.current;
    this.current = stale;
    // Two intervals or more: what was current is stale too.
    if (past >= this.intervalMs * 2) this.previous.reset();
    this.lastReset = now;
    return past;
  }
}
