/**
 * Room for new keys on a `SyncedLimiter` node whose accounts are full: the accounts a new key may
 * take the place of, and how fast they are handed out.
 *
 * Under a flood of distinct keys the accounts fill with keys checked once on credit, and room
 * comes only as syncs pay their debts, 1,024 a sync. Handed out first come, first served, the
 * room a sync makes went to the first new keys after it (at 50,000 new keys a second, those of
 * the next 20 ms), so a new client whose retries fell later in the sync period was refused every
 * time, and an attacker who timed a burst just after each sync took all of it. So the room found
 * in a period is handed out evenly over it: by a time `t` into the period, at most that share of
 * it (`t` over the length of the period before, rounded up). New keys then get in at any moment of
 * the period alike, each with the chance `room / new keys`, and no burst takes more than its share
 * of the time it lasts.
 *
 * @module
 */
export class Room<T> {
  /** What may make room, oldest offer first. */
  readonly #spare = new Set<T>();
  /** `performance.now()` when the current period began (see {@link startPeriod}). */
  #from: number;
  /** The length of the period before, over which this one's room is handed out. */
  #period = 0;
  /** Room given in the current period. */
  #given = 0;

  /** A room whose first period begins at `now` (when the limiter was made). */
  constructor(now: number) {
    this.#from = now;
  }

  /** `item` may make room; an item offered again keeps its place in line. */
  offer(item: T): void {
    this.#spare.add(item);
  }

  /** `item` may make room no more (it left, or was forgotten otherwise). */
  withdraw(item: T): void {
    this.#spare.delete(item);
  }

  /** Forgets every offer. */
  clear(): void {
    this.#spare.clear();
  }

  /**
   * A new period begins at `now`: a sync asked for loans, and the debts it pays make room when its
   * reply comes. Room not given in the period before stays on offer.
   */
  startPeriod(now: number): void {
    this.#period = now - this.#from;
    this.#from = now;
    this.#given = 0;
  }

  /**
   * The oldest offer `usable` accepts, taken off the line with every offer passed over (an offer
   * that is no longer usable comes back only when offered again, so over a flood each call costs a
   * constant time on average); `undefined` when there is none, or when the room this period may
   * give by `now` is given.
   */
  take(now: number, usable: (item: T) => boolean): T | undefined {
    const elapsed = now - this.#from;
    const share = elapsed < this.#period ? elapsed / this.#period : 1;
    if (this.#given >= Math.ceil((this.#given + this.#spare.size) * share)) return undefined;
    for (const item of this.#spare) {
      this.#spare.delete(item);
      if (usable(item)) {
        this.#given++;
        return item;
      }
    }
    return undefined;
  }
}
