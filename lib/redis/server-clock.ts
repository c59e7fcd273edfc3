/**
 * Redis's wall clock as one node estimates it from its syncs: the one clock every node of a fleet
 * can share. A synced rate's windows are fixed on it, so that a node's own wall clock, ahead,
 * behind, or stepped (a bad NTP server, a VM resumed, an operator's `date`), never moves the
 * window it counts in away from the others'.
 */
import type { Clock } from '../clock.js';

/**
 * How long an estimate stands against later ones from slower round trips: `performance.now()` and
 * Redis's clock drift apart by at most parts per million, so a minute's drift is well under a
 * millisecond.
 */
const RENEW_MS = 60_000;

export class ServerClock implements Clock {
  /** Redis's epoch milliseconds less `performance.now()`; undefined before the first reply. */
  #offset: number | undefined;
  /** The round trip of the reply {@link #offset} came from, and when it came. */
  #roundTrip = Infinity;
  #at = 0;

  /**
   * Takes in `serverMs`, Redis's time during a call sent at `sentAt` and answered at `receivedAt`
   * (both `performance.now()`). The reply bounds the offset within half its round trip, event-loop
   * delays included, so the tightest of the recent ones is kept.
   */
  heard(serverMs: number, sentAt: number, receivedAt: number): void {
    const roundTrip = receivedAt - sentAt;
    if (this.#offset !== undefined && roundTrip > this.#roundTrip && receivedAt - this.#at < RENEW_MS) return;
    this.#offset = serverMs - (sentAt + receivedAt) / 2;
    this.#roundTrip = roundTrip;
    this.#at = receivedAt;
  }

  /** Whether a reply has told Redis's time: before, {@link now} is this process's own clock. */
  get known(): boolean {
    return this.#offset !== undefined;
  }

  /** Redis's epoch milliseconds now, as estimated; this process's `Date.now()` before any reply. */
  now(): number {
    return this.#offset === undefined ? Date.now() : performance.now() + this.#offset;
  }
}
