/**
 * Exact fleet-wide counts of the keys near a synced quota's limit: the heavy hitters of
 * `SyncedWindowQuota` (its `heavyHitters` option), so that no client is refused because other
 * clients' keys share its counters.
 *
 * A node begins tracking a key in a window once the key's fleet-wide sketch estimate reaches the
 * threshold, and from then on counts it exactly: its own requests for the key since then. Each
 * window's counts are an entry of the sync like a sketch's (script.ts), whose cells are not
 * counter positions but key ids (52 bits of the key's hash under the sketch's seed), each node's
 * value its own count of the key: Redis sums them, and every node pulls the others' sums of the
 * keys that changed. The same protocol, so a count is never added twice (cumulative values) nor
 * lost for good (a Redis that lost the entry gets every node's counts again). Every node syncs the
 * entry from the window's start, tracking keys or not, so one that begins tracking a key already
 * holds the others' counts of it, and after the window ended until what it counted exactly in it
 * has been pushed (as the window's sketch: rate.ts `SyncedRate`, "Windows and syncs").
 *
 * The others' counts arrive with the sync's lag, as the sketch's do, and a pull carries at most
 * 4,096 changed cells (sync-call.ts): while a flood changes more exact counts a sync than that,
 * they queue, at most `nodes × capacity` of them a window, so the lag grows by up to that over
 * 4,096 syncs (the bound's `syncMs + RTT` is then the longest time between a change and its pull).
 *
 * A tracked key is counted exactly only while its estimate is at the threshold: after a refund
 * (`adjust`) took the estimate below it, its requests are not, until it is back (more admitted
 * meanwhile, never fewer). A Redis that lost its data does not: until the others push their counts
 * again, a node keeps them, in the sketch and here, as it knew them ({@link ExactCells.apply}).
 *
 * The sum over nodes is a lower bound of the key's count in the window: what each node counted
 * before it began tracking the key is missing, less than the threshold per node (a node begins
 * when its own estimate, its own count included, reaches it). So a quota that refuses only when
 * that sum passes its limit never refuses a client within it, however full the sketch is, and
 * admits at most `nodes × (threshold − 1)` more than the sketch alone would, plus what the others
 * counted and this node has not pulled yet (the sync's lag, as for the sketch), while every node
 * has room: a node whose table is full judges the keys it cannot track on the sketch and counts
 * none of their requests here, so each such node may admit a key up to the limit more (README).
 * Two keys share an id with probability 2^-52 per pair (`n` tracked keys: at most `n² / 2^53`);
 * their counts then add up.
 *
 * @module
 */
import type { HeavyTalker } from '../core.js';
import { storedKey } from '../long-key.js';
import {
  PulledEntry,
  saturated,
  type Census,
  type EntryKeys,
  type Pull,
  type Push,
  type SyncedEntry,
} from './cells.js';

/**
 * How many keys a node keeps counts of in a window, its tracked keys included, as a multiple of
 * its capacity: past that, a pulled count is kept only for a key this node tracks, and a key it
 * begins tracking later learns the others' counts at their next change (its lower bound lower
 * until then: more admitted, never fewer). At the defaults, 20,000 keys tracked and the others'
 * counts of 60,000 more took 12.3 MB of heap (measured, 28 Nov 2026); an ended window keeps only
 * its tracked keys.
 */
const CELLS_PER_CAPACITY = 4;

/** What a node knows of one key id in a window. */
interface Cell {
  /** This node's count since it began tracking the key; `undefined` while it does not track it. */
  mine: number | undefined;
  /** Every other node's count, as of the last pull (at least a floor: {@link ExactCells.apply}). */
  others: number;
  /** Whether the count changed since the last push taken. */
  dirty: boolean;
  /** A tracked key, in its bounded form (`storedKey`): what {@link ExactCells.talkers} lists. */
  key: string;
  /** The sketch's fleet-wide estimate at the key's last request here: its listed upper bound. */
  estimate: number;
}

/** One window's exact counts on this node: the keys it tracks and the others' counts of them. */
export class ExactCells extends PulledEntry implements SyncedEntry {
  readonly keys: EntryKeys;
  readonly ttlMs: () => number;
  readonly leaseMs = 0;
  readonly census: Census;
  acked = 0;
  /** Most keys tracked in the window. */
  readonly capacity: number;
  /** Keys tracked. */
  tracked = 0;
  /** Requests of keys past the threshold that found the table full (counted in the sketch only). */
  overflow = 0;
  /** Per key id: this node's count if it tracks it, and the others'. One lookup per request. */
  readonly #cells = new Map<number, Cell>();
  /** Ids whose count changed since the last push taken, oldest change first. */
  #dirty: number[] = [];
  /**
   * Per key id, the others' count as this node knew it when the window's last new incarnation
   * began here: a floor under what it pulls ({@link apply}); `undefined` when none holds.
   */
  #floor: Map<number, number> | undefined;
  /** Whether the last push taken is not answered yet: see `SyncedCells.pending`. */
  #inFlight = false;
  /**
   * Whether the window ended here ({@link forgetOthers}): its pulls, while it still pushes what
   * it had not, keep only the counts of keys this node tracks.
   */
  #ended = false;

  constructor(capacity: number, keys: EntryKeys, census: Census, ttlMs: () => number) {
    super();
    this.capacity = capacity;
    this.keys = keys;
    this.census = census;
    this.ttlMs = ttlMs;
  }

  /**
   * Adds `value` (negative: a refund, never below 0) to this node's count of `id`, tracking it
   * first if there is room; returns the fleet's count of it, or `undefined` when it is not tracked
   * (the table is full).
   */
  add(id: number, value: number, key: string, estimate: number): number | undefined {
    let cell = this.#cells.get(id);
    if (cell?.mine === undefined) {
      if (this.tracked >= this.capacity) {
        this.overflow++;
        return undefined;
      }
      this.tracked++;
      if (cell === undefined) {
        cell = { mine: 0, others: 0, dirty: false, key: '', estimate: 0 };
        this.#cells.set(id, cell);
      } else {
        cell.mine = 0;
      }
      cell.key = storedKey(key);
    }
    const mine = Math.max(0, (cell.mine as number) + value);
    cell.mine = mine;
    cell.estimate = estimate;
    if (!cell.dirty) {
      cell.dirty = true;
      this.#dirty.push(id);
    }
    return mine + cell.others;
  }

  /**
   * What {@link add} of 0 would return, without tracking `id`: the fleet's count of it as far as
   * this node knows (its own count 0 if untracked), or `undefined` when the table is full and
   * `id` is not in it.
   */
  peek(id: number): number | undefined {
    const cell = this.#cells.get(id);
    if (cell?.mine === undefined && this.tracked >= this.capacity) return undefined;
    return (cell?.mine ?? 0) + (cell?.others ?? 0);
  }

  /**
   * The keys this node tracks, with bounds on their fleet-wide counts: `lower` the nodes' exact
   * counts added up, `upper` the sketch's estimate at the key's last request here (at least
   * `lower`). Unsorted.
   */
  talkers(): HeavyTalker[] {
    const talkers: HeavyTalker[] = [];
    for (const cell of this.#cells.values()) {
      if (cell.mine === undefined) continue;
      const lower = cell.mine + cell.others;
      talkers.push({ key: cell.key, lower, upper: Math.max(lower, cell.estimate) });
    }
    return talkers;
  }

  /**
   * Drops the others' counts of keys this node does not track, for good: needed only to begin
   * tracking them, which an ended window never does (its tracked keys stay, for their top
   * talkers, and so does what it has not pushed of them: see `SyncedRate.entries`).
   */
  forgetOthers(): void {
    this.#ended = true;
    for (const [id, cell] of this.#cells) if (cell.mine === undefined) this.#cells.delete(id);
    this.#floor = undefined;
  }

  /** This node's own count of `id`, if tracked. */
  local(id: number): number | undefined {
    return this.#cells.get(id)?.mine;
  }

  take(max: number): Push {
    const cells = this.#dirty.length <= max ? this.#dirty : this.#dirty.splice(0, max);
    if (cells === this.#dirty) this.#dirty = [];
    const values = cells.map((id) => {
      const cell = this.#cells.get(id)!;
      cell.dirty = false;
      return String(saturated(cell.mine as number));
    });
    this.#inFlight = cells.length > 0;
    return { cells, values };
  }

  get waiting(): number {
    return this.#dirty.length;
  }

  /** Whether Redis may still lack some of this node's counts: see `SyncedCells.pending`. */
  get pending(): boolean {
    return this.#inFlight || this.#dirty.length > 0;
  }

  restore(push: Push): void {
    this.#inFlight = false;
    for (const id of push.cells) {
      const cell = this.#cells.get(id)!;
      if (!cell.dirty) {
        cell.dirty = true;
        this.#dirty.push(id);
      }
    }
  }

  /**
   * As `SyncedCells.apply` for a window's sketch: a new incarnation pushes all of this node's
   * counts again, and the others' counts as this node knew them, of keys it tracks or not, stay a
   * floor for the window's life: each reads the larger of it and what it pulls, so a key is not
   * judged on this node's count alone until the others push theirs again (up to 198 admitted in
   * a window of 100 before). A pulled count of a key this node does not track is kept while the
   * cells number under {@link CELLS_PER_CAPACITY} × `capacity`, and only while the window has not
   * ended here.
   */
  apply(pull: Pull, seq: number, sentAt: number): void {
    this.#inFlight = false;
    if (pull.applied) this.acked = seq;
    const renewed = this.pulled(pull);
    this.census.count(pull.nodes, sentAt, renewed);
    if (renewed) {
      // Every cell's `others` holds at least any floor before: the new floor covers both.
      const floor = new Map<number, number>();
      for (const [id, cell] of this.#cells) {
        if (cell.others > 0) floor.set(id, cell.others);
        if (cell.mine !== undefined && !cell.dirty) {
          cell.dirty = true;
          this.#dirty.push(id);
        }
      }
      this.#floor = floor;
    }
    const room = this.#ended ? 0 : CELLS_PER_CAPACITY * this.capacity;
    for (let j = 0; j < pull.cells.length; j++) {
      const id = pull.cells[j] as number;
      const others = Math.max(this.#floor?.get(id) ?? 0, pull.others[j] as number);
      const cell = this.#cells.get(id);
      if (cell !== undefined) cell.others = others;
      else if (this.#cells.size < room) {
        this.#cells.set(id, { mine: undefined, others, dirty: false, key: '', estimate: 0 });
      }
    }
  }
}

/** A synced quota's exact counting: its threshold, table size and layout. */
export class ExactCounts {
  /** The estimate at which a node begins tracking a key. */
  readonly threshold: number;
  /** Most keys a node tracks per window. */
  readonly capacity: number;
  /**
   * What decides a key's id: the seed, which keys the hash the id is taken from (the sketch's
   * own, `hasher.ts` `lastId`), as the digest of `sketchLayout` gives it. Nodes that disagree
   * must not add up their counts (script.ts).
   */
  readonly layout: string;

  constructor(threshold: number, capacity: number, sketchLayout: string) {
    this.threshold = threshold;
    this.capacity = capacity;
    this.layout = `x1-${sketchLayout.slice(sketchLayout.lastIndexOf('-') + 1)}`;
  }
}
