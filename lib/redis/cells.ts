/**
 * One synced sketch's local state: this node's own counts and everyone else's as last pulled.
 *
 * A key's estimate is, per row, the others' count plus this node's, and the minimum over rows, as
 * in any count-min sketch: a sketch that is the element-wise sum of every node's sketch (the
 * sketches are linear). This node's counts are exact and immediate; the others' are as of the last
 * sync. The two arrays are the sketch's shape, so memory is fixed whatever the traffic and however
 * long Redis is away: what a failed sync could not push stays in `mine` and is marked to push.
 */

/** What one entry sends in a sync: the cells changed since the last acknowledged push, with their cumulative values. */
export interface Push {
  cells: number[];
  values: string[];
}

/**
 * Where an entry lives in Redis (script.ts). A sketch's layout is part of its base, so nodes that
 * would put one key in different cells never mix their counts.
 */
export interface EntryKeys {
  /** The key base: the structure's, its part (`e`, `w<window>`, `i`, `p`) and the layout. */
  base: string;
  /** The node registry of the structure's kind of part: its census ({@link Census}). */
  registry: string;
  /** The layout registry of the part (of every window, for a rate): which layouts synced it lately. */
  layouts: string;
  /** What decides the cells a key lands in: `sketchLayout` for a sketch. */
  layout: string;
}

/**
 * The keys of `part` of the structure whose keys start with `structure`, laid out as `layout`;
 * `kind` names the node and layout registries, shared by the parts of one kind (a rate's windows).
 * Structures of different kinds under one name (a sketch and a limiter called `api`) have their
 * own registries, so each counts the nodes that sync it, not the other's.
 */
export function entryKeys(structure: string, part: string, layout: string, kind = part): EntryKeys {
  return {
    base: `${structure}:${part}:${layout}`,
    registry: `${structure}:${kind}:nodes`,
    layouts: `${structure}:${kind}:layouts`,
    layout,
  };
}

/** One entry's part of the script's reply. */
export interface Pull {
  applied: boolean;
  /** Not applied because Redis holds a later sequence number of this node id (script.ts). */
  idTaken: boolean;
  /**
   * Not applied because Redis holds this process's own sequence number ahead of the sync: that
   * number (script.ts `SEQ_SPAN`); else 0.
   */
  ahead: number;
  /** The version pulled up to: the next pull asks for the cells changed after it. */
  version: number;
  /**
   * The entry's newest version in Redis: past `version` when the pull was cut short (more changed
   * cells wait than one pull carries: script.ts).
   */
  head: number;
  incarnation: string;
  nodes: number;
  /**
   * The cells pulled, changed since the version asked for, then those the catch-up scan read
   * ({@link PulledEntry}), with the others' count of each (the global count less this node's).
   */
  cells: number[];
  others: number[];
  /**
   * Where the catch-up scan got to: the cursor to send next (`<run_id>:<cursor>`, naming the Redis
   * process it is good on: script.ts), `'0'` once it went through the entry, `'-1'` when none ran
   * (none was asked for, or the pull was not cut short).
   */
  cursor: string;
  /** The other layouts that synced this part of the structure lately: a misconfigured fleet. */
  layouts: string[];
}

/**
 * The registry keeps a node this many sync periods after its last sync (its liveness period, sent
 * with each sync: sync-call.ts), and a node's share holds a higher count as long
 * ({@link Census.shareNodes}).
 */
export const LIVE_PERIODS = 10;

/** What a {@link Census} reads of its structure's sync. */
export interface CensusSync {
  /** The most live nodes any structure on the sync counted: the count before a first sync. */
  readonly nodes: number;
  /** The sync period, of which the registry's lifetime is `LIVE_PERIODS`. */
  readonly syncMs: number;
}

/**
 * The live nodes syncing one structure, as its registry counted them at the structure's last sync,
 * and the count its `'local'` fail policy and a limiter's credit divide by ({@link shareNodes}).
 * Shared by the structure's cells (a rate's windows come and go; its census stays). Before the
 * structure's first sync both read the sync's `nodes`, the most nodes any structure on it has
 * counted: a structure added to a running sync knows the fleet's size at once, from its
 * neighbours, rather than taking itself for alone.
 */
export class Census {
  /** The registry's count at the last sync, or `undefined` before the first. */
  #counted: number | undefined;
  /**
   * The counts {@link shareNodes} still holds, each with the number of the count that took it in
   * ({@link counts}): each larger than every later one (so the first is the largest), which keeps
   * them fewer than the largest.
   */
  readonly #peaks: { nodes: number; at: number }[] = [];
  /** Counts taken in so far. */
  #counts = 0;
  /** The number of the last count that may have followed a loss of registrations, for shares. */
  #lostAt = NaN;
  /**
   * `performance.now()` when the count came in that began the wait of {@link countedAfter} (the
   * first, or the last that may have followed a loss of registrations), and when the sync of the
   * last one was sent.
   */
  #waitFrom = NaN;
  #lastSentAt = NaN;
  readonly #sync: CensusSync;

  constructor(sync: CensusSync) {
    this.#sync = sync;
  }

  /** Whether a sync has counted this structure's nodes yet. */
  get counted(): boolean {
    return this.#counted !== undefined;
  }

  /**
   * Whether the last count came from a sync sent at least `ms` after this node first heard a
   * count, so after its own first registration, or after it last heard one that may have followed
   * a loss of the registry's entries (see {@link count}); with `ms` 0: whether any sync counted.
   * Nodes that start together, each registering at its first sync, count 1, 2, …, N in turn; a
   * sync period later each counts them all, while they keep their period. So do nodes that
   * register again, one at a time, after Redis lost the registry.
   */
  countedAfter(ms: number): boolean {
    return this.counted && (ms === 0 || this.#lastSentAt - this.#waitFrom >= ms);
  }

  /** Live nodes syncing the structure, at least 1. */
  get nodes(): number {
    return this.#counted ?? this.#sync.nodes;
  }

  /**
   * The node count a node's share divides by (a quota's `'local'` share, a limiter's `'local'`
   * bucket and credit), at least {@link nodes}: it rises with the count at once, and a higher
   * count holds for the registry's lifetime in this node's syncs (`LIVE_PERIODS` counts) after it
   * was last counted and after the last count that may have followed a loss of registrations: a
   * new incarnation, a count at most half the last (nodes registering again one at a time count
   * from 1), or the first count after two registry lifetimes with none (every registration may
   * have lapsed meanwhile: a Redis back for under a sync period, six times over, each time after
   * such a spell, brought 4 nodes' shares of a `'local'` quota back to 1/1 … 1/4, 250 admitted of
   * 120, when only a count at most half the last was a sign). Counted in syncs, not time (the
   * entries of one call count once), so that a spell with no sync (every node cut off from
   * Redis, which may lose the registry meanwhile) holds it too. Not any lower count: a fleet with
   * churn (short-lived nodes, each under a new id) counts one or two fewer every lifetime or so,
   * and a review saw 8–9 live nodes divide by 14 for 30 lifetimes, as long as the churn went on.
   *
   * After Redis lost the registry, the nodes register again one at a time, each at its next sync,
   * and count 1, 2, …, N in turn, as at a start. With Redis gone again before their next syncs (a
   * Redis that crashes and restarts), each node went on with its count of the last sync for the
   * whole outage: 4 nodes under a `'local'` quota of 100 admitted 100, 50, 33 and 25, 208 in all
   * (now 25 each). Held from the last sign of a loss, the count before it stays however often
   * Redis restarts, and however long every node was cut off from it (the registry lapsed as well:
   * each node's first count after it is a sign). The price: the registry counts a node that
   * stopped syncing for up to two lifetimes, and the shares a lifetime of syncs longer (more when
   * more than half the fleet left at once), so the nodes left admit less than their share
   * meanwhile, never more. A node started anew holds no earlier count: its first sync's count is
   * its share's, as at a start, when the nodes started together count 1, 2, …, N until their
   * second syncs.
   */
  get shareNodes(): number {
    return this.#peaks[0]?.nodes ?? this.#sync.nodes;
  }

  /**
   * Takes in a pull's count (this node included, so at least 1 but for a malformed reply), from a
   * sync sent at `sentAt` (`performance.now()`), whose entry found a new incarnation if `renewed`.
   *
   * The wait of {@link countedAfter} begins again at a count that may follow a loss of the
   * registry's entries, after which the nodes register again one at a time, each at its next
   * sync, and count 1, 2, …, N in turn as at a start: at a new incarnation of the entry (Redis
   * restarted without its data or went back to older data, with the registry beside it, or lost
   * the entry), and at a count below the last one (the registry lost alone, or its entries past
   * their lifetime of at least 10 sync periods: a Redis back from a snapshot older than that,
   * every node cut off from Redis that long). Before, the wait ran from the first count only:
   * after a restart to an empty Redis, 8 nodes lent themselves credit over counts of 1 to 8 and
   * admitted 360–412 in a window whose bound was 300 (now 187–197). A count that drops because a
   * node left (closed, or dead past its registry lifetime) begins it again too, which costs every
   * other node a sync period without credit (it still admits what it was lent): the registry
   * cannot tell a node that left from one not registered again yet. A long gap since the last
   * count needs no rule of its own: a node whose count after a loss is at least its last one
   * divides by at least the fleet it last counted, so such nodes' credit stays within one burst,
   * and nodes started meanwhile wait from their own first count. {@link shareNodes} holds a higher
   * count a lifetime from the same counts.
   */
  count(nodes: number, sentAt: number, renewed: boolean): void {
    const counted = Math.max(1, nodes);
    const last = this.#counted;
    const peaks = this.#peaks;
    // The entries of one call (a rate's two windows) are one sync: the hold is counted in syncs.
    const n = sentAt === this.#lastSentAt ? this.#counts : ++this.#counts;
    // No count for two registry lifetimes (how long a member stays past its last sync: script.ts),
    // less a period of margin for the calls' latency: every registration, this node's too, may
    // have lapsed meanwhile. Or a count below the one held after a missed sync: a node of a
    // shorter `syncMs` (the script allows one) lapses sooner than this node's own periods say, and
    // a review saw a node of 30 ms among nodes of 10 count 3 (after 4, then after 3) every spell,
    // share as 3 a lifetime on, and the fleet admit 130 of 120. Not below the last count: 3 after
    // 3 is no drop. A count lower by a node gone while this node keeps missing syncs holds the
    // higher one as long: fewer admitted, never more; a node that syncs in time lets it go.
    const gap = sentAt - this.#lastSentAt;
    const syncMs = this.#sync.syncMs;
    const lapsed =
      gap >= (2 * LIVE_PERIODS - 1) * syncMs || (gap >= 2 * syncMs && counted < (peaks[0]?.nodes ?? counted));
    if (last === undefined || renewed || counted < last) this.#waitFrom = performance.now();
    if (last === undefined || renewed || lapsed || counted * 2 <= last) this.#lostAt = n;
    while (peaks.length > 0 && peaks[peaks.length - 1]!.nodes <= counted) peaks.pop();
    peaks.push({ nodes: counted, at: n });
    const held = n - LIVE_PERIODS;
    while (this.#lostAt < held && peaks[0]!.at < held) peaks.shift();
    this.#counted = counted;
    this.#lastSentAt = sentAt;
  }
}

/**
 * How far an entry's pulls have got in its incarnation: {@link SyncedCells}' and `ExactCells`'.
 * A pull carries at most 4,096 changed cells, oldest version first (script.ts), so a node that
 * joins a busy entry, or pulls one from version 0 again after Redis lost it, holds the others'
 * counts only some syncs later: {@link caughtUp} says when (what `RedisSync.ready()` waits for).
 *
 * The version pulls alone cannot tell it: a cell changed again gets a new version, so a cell that
 * held the others' count at the join and changes again before the pulls reach it moves ahead of
 * them, and pulls that went past the newest version of the join may never have brought it (a
 * count-min sketch missing one counter of a busy key reads it as about 0). So until it is caught
 * up the node also scans the entry's counts (`HSCAN`, which does not go by version) from the
 * incarnation's first pull here, about 4,096 cells a sync ({@link scan}), in the syncs whose pull
 * is cut short: a scan that went through returned every cell held from its start to its end, with
 * its value when read, so at least what the others had counted at the join. A scan goes on only on
 * the Redis process that began it: the script begins it again on another (a Redis restarted with
 * its data, a promoted replica), whose buckets hold the cells in another order.
 */
export abstract class PulledEntry {
  /** Version of the last pull: the next pull asks only for cells changed after it. */
  since = 0;
  /**
   * Whether this node holds, in the entry's incarnation, what the others had counted at its first
   * pull of it: the others' counts as of this node's joining (or of Redis losing the entry). True
   * once a pull was not cut short (it reached the newest version: every cell is in) or the
   * catch-up scan went through the entry ({@link scan}): under a flood that changes more cells a
   * sync than a pull carries, no pull may ever reach the newest version, and a `ready()` waiting
   * for that alone would wait for good.
   */
  caughtUp = false;
  /** Whether the last pull was cut short: changes wait in Redis past {@link since} (`stats.behind`). */
  behind = false;
  /**
   * The catch-up scan's cursor, sent with the next sync: `'0'` to begin (at the incarnation's
   * first pull here, and again at a new incarnation), `'-1'` once {@link caughtUp}: a node caught
   * up asks Redis for no scan. Else as the last reply gave it, naming the Redis process it came
   * from, which the script checks (another process begins the scan again: script.ts).
   */
  scan = '0';
  #incarnation: string | undefined;

  /**
   * Moves {@link since} to where `pull` got, and the catch-up scan to where it got; returns
   * whether it found a new incarnation (Redis lost the entry, or this node's record in it), which
   * this node pulls from version 0, and scans from the start, again.
   */
  protected pulled(pull: Pull): boolean {
    const { head } = pull;
    const renewed = this.#incarnation !== undefined && this.#incarnation !== pull.incarnation;
    this.#incarnation = pull.incarnation;
    this.since = renewed ? 0 : pull.version;
    if (renewed) {
      // The pull and scan went by the old incarnation's version and cursor: only an empty new
      // incarnation is caught up with.
      this.caughtUp = head === 0;
      this.scan = '0';
    } else {
      this.caughtUp ||= pull.version >= head || pull.cursor === '0';
      if (pull.cursor !== '-1') this.scan = pull.cursor;
    }
    if (this.caughtUp) this.scan = '-1';
    this.behind = this.since < head;
    return renewed;
  }
}

/**
 * One entry of the sync (script.ts) as the sync sees it: where it lives, what to push and what to
 * do with a pull. A sketch's counters ({@link SyncedCells}) or a quota's exact counts (`exact.ts`).
 */
export interface SyncedEntry {
  readonly keys: EntryKeys;
  /** Milliseconds the entry's keys live after this sync (0: for ever). */
  readonly ttlMs: () => number;
  /** Milliseconds this node's contribution outlives its last sync (0: for ever). */
  readonly leaseMs: number;
  /** Version of the last pull. */
  readonly since: number;
  /** Whether it holds what the others had counted when its incarnation began here ({@link PulledEntry}). */
  readonly caughtUp: boolean;
  /** The catch-up scan's cursor to send (`'-1'`: none; {@link PulledEntry.scan}). */
  readonly scan: string;
  /** Whether its last pull was cut short: more of the others' changes wait in Redis. */
  readonly behind: boolean;
  /** Sequence number of the last sync Redis replied it applied for this entry. */
  readonly acked: number;
  /** Cells changed and not yet pushed (some may be back at their pushed value). */
  readonly waiting: number;
  /** Up to `max` changed cells to push now; {@link restore} marks them again if the push fails. */
  take(max: number): Push;
  restore(push: Push): void;
  /** Takes in the pull of sync `seq`, sent at `sentAt` (`performance.now()`). */
  apply(pull: Pull, seq: number, sentAt: number): void;
}

/**
 * The most a node pushes for one cell, either sign: 2^53 − 1, exact as a double in JavaScript and
 * in Redis's Lua, and the sum of up to 1,023 nodes' within Redis's 64-bit integers. Past it the push
 * saturates (the node's own count goes on, so an `enter` and its `leave` still pair up); before, a
 * node past 2^63 sent a value the script refused as corrupt, and every one of its syncs deleted
 * the fleet's whole entry.
 */
const MAX_CONTRIBUTION = Number.MAX_SAFE_INTEGER;

/** `value` saturated at ±{@link MAX_CONTRIBUTION}. */
export const saturated = (value: number): number => Math.min(MAX_CONTRIBUTION, Math.max(-MAX_CONTRIBUTION, value));

export class SyncedCells extends PulledEntry implements SyncedEntry {
  /** This node's cumulative count per counter. */
  readonly mine: Float64Array;
  /** Every other node's count per counter, as of the last pull (at least a floor: see `apply`). */
  readonly others: Float64Array;
  /** Where the entry lives in Redis. */
  readonly keys: EntryKeys;
  /** Milliseconds the entry's keys live after this sync (0: for ever). */
  readonly ttlMs: () => number;
  /**
   * Milliseconds this node's contribution outlives its last sync in the global count (0: for ever,
   * the contribution stays until overwritten). See script.ts.
   */
  readonly leaseMs: number;
  /**
   * Sequence number of the last sync Redis replied it applied for this entry: Redis remembering
   * less for this node means it went back in time (script.ts).
   */
  acked = 0;
  readonly #marked: Uint8Array;
  #dirty: number[] = [];
  /**
   * Per counter, the value last handed to a push (Redis holds it once that sync is applied; NaN
   * after a failed one: unknown). A counter marked but back at it by the next push (an `enter`
   * and its `leave`) has nothing to push and is passed over without counting against the push's
   * cells: before, a flood of paired `enter`/`leave` on distinct keys queued 40,000 counters, and
   * a counter changed behind them reached the other nodes 660 ms late instead of one sync.
   */
  readonly #pushed: Float64Array;
  /**
   * Whether the last push taken is not answered yet: its call is in flight, and a failure would
   * mark its cells again ({@link restore}). See {@link pending}.
   */
  #inFlight = false;

  /** The structure's census, which this entry's pulls update. */
  readonly census: Census;
  /**
   * How long the others' counts as this node knew them stay a floor under what it pulls after a
   * new incarnation ({@link apply}), in milliseconds: 0 for no floor (a leased entry, whose
   * counts go down as slots leave and nodes are reaped), `Infinity` for the entry's life (a
   * window's, which ends with its window).
   */
  readonly floorMs: number;
  /**
   * The floor: per counter, the others' count as this node knew it when the last new incarnation
   * began here, or `undefined` when none holds (a copy of {@link others}, made only then).
   */
  #floor: Float64Array | undefined;
  /**
   * Under a floor that ends ({@link floorMs} finite), the others' counts as pulled in the new
   * incarnation: what {@link others} goes back to then.
   */
  #pulledOthers: Float64Array | undefined;
  /** The `sentAt` of the first sync whose pull no longer keeps the floor. */
  #floorUntil = 0;

  constructor(
    counters: number,
    keys: EntryKeys,
    census: Census,
    ttlMs: () => number = () => 0,
    leaseMs = 0,
    floorMs = 0,
  ) {
    super();
    this.census = census;
    this.mine = new Float64Array(counters);
    this.others = new Float64Array(counters);
    this.#marked = new Uint8Array(counters);
    this.#pushed = new Float64Array(counters);
    this.keys = keys;
    this.ttlMs = ttlMs;
    this.leaseMs = leaseMs;
    this.floorMs = floorMs;
  }

  /** Adds `value` to this node's counters `indexes` (one per row); returns the new estimate. */
  add(indexes: ArrayLike<number>, value: number): number {
    let estimate = Infinity;
    for (let r = 0; r < indexes.length; r++) {
      const i = indexes[r] as number;
      const v = (this.mine[i] as number) + value;
      this.mine[i] = v;
      this.#mark(i);
      estimate = Math.min(estimate, v + (this.others[i] as number));
    }
    return estimate;
  }

  /** The fleet-wide estimate at counters `indexes`. */
  estimate(indexes: ArrayLike<number>): number {
    let estimate = Infinity;
    for (let r = 0; r < indexes.length; r++) estimate = Math.min(estimate, this.#sum(indexes[r] as number));
    return estimate;
  }

  /** This node's own estimate at counters `indexes`. */
  local(indexes: ArrayLike<number>): number {
    let estimate = Infinity;
    for (let r = 0; r < indexes.length; r++) estimate = Math.min(estimate, this.mine[indexes[r] as number] as number);
    return estimate;
  }

  /**
   * Up to `max` cells to push now, unmarked (the rest wait for the next sync), passing over cells
   * back at the value last pushed; {@link restore} marks them again if the push fails.
   */
  take(max: number): Push {
    const cells: number[] = [];
    const values: string[] = [];
    let next = 0;
    for (; next < this.#dirty.length && cells.length < max; next++) {
      const i = this.#dirty[next] as number;
      this.#marked[i] = 0;
      const value = saturated(this.mine[i] as number);
      if (value === this.#pushed[i]) continue;
      this.#pushed[i] = value;
      cells.push(i);
      values.push(String(value));
    }
    this.#dirty = next === this.#dirty.length ? [] : this.#dirty.slice(next);
    this.#inFlight = cells.length > 0;
    return { cells, values };
  }

  /** Cells changed since the last push that was taken. */
  get waiting(): number {
    return this.#dirty.length;
  }

  /**
   * Whether Redis may still lack some of this node's counts: cells wait for a push, or the last
   * push taken has not been answered (its call in flight may fail and mark them again). A rate
   * keeps a window that ended while it is pending (rate.ts `SyncedRate.entries`).
   */
  get pending(): boolean {
    return this.#inFlight || this.#dirty.length > 0;
  }

  /** Marks the cells of a push that failed, to go (with their values by then) in the next one. */
  restore(push: Push): void {
    this.#inFlight = false;
    for (const i of push.cells) {
      this.#pushed[i] = NaN;
      this.#mark(i);
    }
  }

  /**
   * Takes in the pull of sync `seq`. A new incarnation (Redis restarted without the data or went
   * back to older data, the keys were deleted, or another node reaped this one's lease) marks all
   * of this node's counts to push again, so the fleet rebuilds the global sketch from the nodes'
   * own, and pulls the others' from version 0.
   *
   * Redis holds another node's counts again only once it synced, saw the new incarnation and
   * pushed them all: two of its syncs, longer while its client reconnects. Meanwhile this node
   * syncs, so it is not stale, and it decided on its own counts alone when they went at once (two
   * nodes, limit 100: 100 admitted on one, Redis restarted empty, the other admitted 69–97 more
   * while the first reconnected for 1.5 s). So with a {@link floorMs}, the others' counts as this
   * node knew them stay a floor: each counter reads the larger of it and what it pulls. The
   * larger, never the sum: a node's re-push is its whole cumulative count, so once it arrives the
   * pull covers the floor and nothing counts twice; an older snapshot's lower counts read as the
   * floor. In a window counts only grow, but for a refund (`adjust`) elsewhere, which the floor
   * hides until the window ends: more refused, never more admitted. Without a floor (a leased
   * entry) the others' counts go, and come back with the pulls.
   */
  apply(pull: Pull, seq: number, sentAt: number): void {
    this.#inFlight = false;
    if (pull.applied) this.acked = seq;
    if (this.#floor !== undefined && sentAt >= this.#floorUntil) {
      if (this.#pulledOthers !== undefined) this.others.set(this.#pulledOthers);
      this.#floor = this.#pulledOthers = undefined;
    }
    const renewed = this.pulled(pull);
    this.census.count(pull.nodes, sentAt, renewed);
    if (renewed) {
      if (this.floorMs > 0) {
        // `others` holds at least any floor before: the new floor covers both.
        this.#floor = this.others.slice();
        this.#pulledOthers = Number.isFinite(this.floorMs) ? new Float64Array(this.others.length) : undefined;
        this.#floorUntil = sentAt + this.floorMs;
      } else {
        this.others.fill(0);
      }
      // Unknown: Redis may hold what this sync pushed into the new incarnation, or nothing.
      this.#pushed.fill(NaN);
      for (let i = 0; i < this.mine.length; i++) if (this.mine[i] !== 0) this.#mark(i);
    }
    const floor = this.#floor;
    for (let j = 0; j < pull.cells.length; j++) {
      const i = pull.cells[j] as number;
      const others = pull.others[j] as number;
      if (floor === undefined) {
        this.others[i] = others;
      } else {
        if (this.#pulledOthers !== undefined) this.#pulledOthers[i] = others;
        this.others[i] = Math.max(floor[i] as number, others);
      }
    }
  }

  /** Counter `i`, fleet-wide. */
  #sum(i: number): number {
    return (this.mine[i] as number) + (this.others[i] as number);
  }

  #mark(i: number): void {
    if (this.#marked[i] === 0) {
      this.#marked[i] = 1;
      this.#dirty.push(i);
    }
  }
}
