/** Event counts per key in fixed wall-clock windows, summed over every node syncing them through Redis. */
import { validateClock, type Clock } from '../clock.js';
import type { Key } from '../core.js';
import { invalidType, outOfRange } from '../errors.js';
import type { RateComponents } from '../rate.js';
import { countArgument, integerOption, optionsObject, shapeOptions } from '../options.js';
import { Census, entryKeys, SyncedCells, type SyncedEntry } from './cells.js';
import { ExactCells, ExactCounts } from './exact.js';
import { KeyHasher } from './hasher.js';
import { syncOption } from './estimator.js';
import type { RedisSync } from './sync.js';
import { closedSyncedError, syncClosedError } from './sync-errors.js';
import { nameOption } from './sync-options.js';

/** Longest interval: a day. Windows are Redis keys that live two intervals. */
const MAX_INTERVAL_MS = 86_400_000;

/**
 * How long a window's keys outlive the end of the interval after it, the last one that reads it:
 * room for nodes whose clocks run up to this much behind.
 */
const SKEW_MARGIN_MS = 10_000;

/**
 * Most windows older than the previous one a rate keeps for what they have not pushed
 * ({@link SyncedRate.entries}). Window `w`'s keys live until `SKEW_MARGIN_MS` past the end of
 * window `w + 1`, so with windows of 5 s or more at most two such windows are still in Redis: the
 * cap binds only on shorter windows, whose counts a sync more than two windows late loses (the
 * oldest first). Each kept window is a sketch as large as the current one (25 bytes a counter:
 * this node's counts, the others', the values last pushed, a mark), so a rate holds at most four
 * windows, twice what it holds while its syncs come in time.
 */
const MAX_ENDED = 2;

/**
 * @internal In a rate's options, the structure it is made for and that structure's window option,
 * which the warning of a window shorter than the sync period names: a `SyncedWindowQuota` counts
 * on a rate of its own.
 */
export const madeFor = Symbol('keepcount.syncedRate.madeFor');

/** @internal {@link SyncedRateOptions} as a structure making a rate for itself gives them. */
export interface OwnedRateOptions extends SyncedRateOptions {
  [madeFor]?: { kind: string; option: string };
}

/** Options of {@link SyncedRate}. */
export interface SyncedRateOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /** The structure's name: nodes that give the same name share the counts. Required; no `{` or `}`. */
  name: string;
  /** The hash seed, the same on every node; see `SyncedEstimatorOptions.seed`. Required. */
  seed: bigint | number;
  /**
   * Length of one window in milliseconds: an integer in [1, 86,400,000]. Required. Make it at least
   * the sync's `syncMs`, better several times it: the nodes see each other's counts only at their
   * syncs, so in a window shorter than that period each node sees mostly its own counts, and
   * constructing such a rate emits a `KeepcountWarning` (`KEEPCOUNT_SHORT_WINDOW`; see the class
   * doc).
   */
  intervalMs: number;
  /** Rows of each window's sketch. Defaults to 4. */
  hashes?: number;
  /** Counters per row of each window's sketch. Defaults to 1024, as `Rate`. */
  slots?: number;
  /**
   * Wall-clock milliseconds since the Unix epoch: window `w` is `[w × intervalMs, (w + 1) ×
   * intervalMs)` on this clock. Defaults to Redis's clock as the sync estimates it
   * (`sync.now()`), which every node shares; a clock given here is each node's own, and nodes
   * whose clocks disagree count in different windows around each boundary (see the class doc).
   * With a clock no warning says the window is shorter than `syncMs`: the clock's milliseconds need
   * not be the sync timer's (a test moves its clock by hand and syncs with `sync.flush()`, on a
   * sync whose timer never fires).
   */
  clock?: Clock;
}

/** A window's number and its cells. */
interface Window {
  index: number;
  cells: SyncedCells;
  /** Its exact counts, made on first use when the rate keeps them (see {@link SyncedRate.exactCells}). */
  exact?: ExactCells;
}

/**
 * A `Rate` shared by every node that syncs it. Unlike `Rate`, whose intervals start at its first
 * call, windows are fixed on the wall clock (window `w` starts at `w × intervalMs` ms since the
 * epoch) so that every node counts into the same one; each window is its own set of Redis keys,
 * expiring once no node reads it.
 *
 * Clocks: windows are fixed on Redis's clock as each node estimates it at its syncs
 * (`sync.now()`: the server time in the reply, within half the quickest recent round trip, carried
 * forward on the node's monotonic clock), so a node's own wall clock running ahead or behind, or
 * stepping (an NTP correction, a resumed VM), does not move its windows. Before its first sync a
 * node reads its own `Date.now()`, and places its windows again on Redis's clock once a sync
 * told it (what it counted in between may count in a window the fleet reads later). Nodes
 * estimate Redis's clock `d` ms apart (round trips and event-loop delays; well under a
 * millisecond on a quiet LAN): one `d` ms ahead moves to the next window `d` ms early, what it
 * counts in those `d` ms goes to the next window (and what the others count then, it no longer
 * sees), so around each boundary the fleet can admit up to that node's admissions in `d` ms more
 * than the limit in one window, and as many fewer in the next. With a `clock` option, `d` is how
 * far the nodes' clocks disagree. A clock that goes back stays in the later window until it
 * catches up. Keys outlive their last reader by 10 s for slower clocks.
 *
 * # Windows and syncs
 * A node sees the others' counts as of its last sync, and they see its own as of theirs: a count
 * reaches the other nodes up to `2 × (syncMs + RTT)` after it was made. A window shorter than
 * `syncMs` therefore ends before most of its counts reach the others: each node's `rate()` reads
 * mostly its own counts, and a `SyncedWindowQuota` holds each node, not the fleet, to its limit
 * (two nodes, 0.85 requests/ms each, syncs every 100 ms: windows of 40 ms admitted 40 a window on
 * a limit of 20, against 1,091 on a limit of 1,000 for windows of 1 s; 29 Nov 2026). Constructing
 * one warns once per process and structure (`KeepcountWarning`, `KEEPCOUNT_SHORT_WINDOW`), but
 * for a rate given its own `clock`.
 *
 * A sync pushes the current and the previous window, and any older window that still holds counts
 * not pushed (one that ended between two syncs, or while the node could not reach Redis) until a
 * sync has pushed them: the two windows before the previous one at most, and only while Redis
 * keeps the window's keys (10 s past the end of the window after it). Older windows are dropped
 * with what they had not pushed, so that memory stays at four windows' sketches however long
 * Redis is away. With windows of 5 s or more that drops none Redis still keeps; windows shorter
 * than a third or so of `syncMs` lose counts this way while Redis is up (Redis held 100 % of a
 * node's counts with windows of 40 ms and syncs every 100 ms, 81 % at 50 and 200 ms, 69 % at 20
 * and 100 ms, against 61 %, 28–47 % and 23 % before; 29 Nov 2026). No node reads a window older
 * than its previous one (but one whose clock runs behind, within those 10 s), so a late push
 * serves Redis's totals, not decisions. It lands in its own window's keys: the other nodes never
 * count it in their current window, and pushes are cumulative, so nothing counts twice.
 */
export class SyncedRate {
  /** The window length in milliseconds. */
  readonly intervalMs: number;
  readonly #sync: RedisSync;
  readonly #hasher: KeyHasher;
  readonly #clock: Clock;
  readonly #base: string;
  /**
   * The sketch's layout and the window length: nodes that disagree on the window count in
   * different windows' keys, so they are reported (`ERR_KEEPCOUNT_LAYOUT`) as other layouts are.
   */
  readonly #layout: string;
  readonly #counters: number;
  /** Counted by whichever windows sync: they come and go, the census stays. */
  readonly #census: Census;
  /** A quota's exact counting, if it keeps exact counts (its own census: its own registry). */
  #exact: { counts: ExactCounts; census: Census } | undefined;
  #closed = false;
  #current: Window;
  #previous: Window;
  /**
   * Windows older than {@link #previous} that may hold counts Redis lacks, oldest first: at most
   * {@link MAX_ENDED}, each kept until a sync pushed it or Redis dropped its keys
   * ({@link entries}).
   */
  #ended: Window[] = [];
  /**
   * True while the windows are placed on this process's `Date.now()`, before the sync knows
   * Redis's clock: the first roll after it does places them again on Redis's clock, back too.
   */
  #provisional: boolean;

  constructor(options: SyncedRateOptions) {
    const o = optionsObject<OwnedRateOptions>(options);
    this.#sync = syncOption(o.sync);
    const name = nameOption('name', o.name);
    if (o.seed === undefined) throw invalidType('The "seed" option', 'a bigint or a number', o.seed);
    this.intervalMs = integerOption('intervalMs', o.intervalMs, 1, MAX_INTERVAL_MS);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 1024 });
    this.#hasher = new KeyHasher(hashes, slots, o.seed);
    const sync = this.#sync;
    this.#clock = o.clock === undefined ? { now: () => sync.now() } : validateClock(o.clock);
    this.#base = `${this.#sync.prefix}:{${name}}`;
    this.#layout = `${this.#hasher.layout}-w${this.intervalMs}`;
    this.#census = new Census(this.#sync);
    this.#counters = hashes * slots;
    this.#provisional = o.clock === undefined;
    const now = this.#index(this.#now());
    this.#previous = this.#window(now - 1);
    this.#current = this.#window(now);
    this.#sync.add(this, 'SyncedRate (or SyncedWindowQuota)', name);
    if (o.clock === undefined && this.intervalMs < this.#sync.syncMs) {
      const { kind, option } = o[madeFor] ?? { kind: 'SyncedRate', option: 'intervalMs' };
      warnShortWindow(kind, option, name, this.intervalMs, this.#sync.syncMs);
    }
  }

  /** @internal Whether its windows are on Redis's clock (or the given one): see `SyncSource.placed`. */
  placed(): boolean {
    return !this.#provisional;
  }

  /** Records `events` (a safe integer; defaults to 1) for `key`; returns its fleet-wide count in the current window. */
  observe(key: Key, events = 1): number {
    return this.observeLocally(key, events, false);
  }

  /**
   * @internal {@link observe}; with `afterSync`, also once the sync closed, counting on this node
   * alone: a quota's decisions never throw because of the sync, its fail policy decides then.
   */
  observeLocally(key: Key, events: number, afterSync: boolean): number {
    if (this.#closed) throw closedSyncedError('SyncedRate');
    if (!afterSync && this.#sync.closed) throw syncClosedError('SyncedRate');
    const indexes = this.#hasher.indexes(key);
    const value = countArgument('events', events);
    this.#roll(this.#now());
    return this.#current.cells.add(indexes, value);
  }

  /** `key`'s fleet-wide events per second in the last completed window. */
  rate(key: Key): number {
    return this.rateWith(key, (c) => (c.prevSamples * 1000) / c.intervalMs);
  }

  /** `fn` applied to `key`'s fleet-wide {@link RateComponents}, e.g. `proportionalRate`. */
  rateWith<T>(key: Key, fn: (components: RateComponents) => T): T {
    const indexes = this.#hasher.indexes(key);
    if (typeof fn !== 'function') throw invalidType('The "fn" argument', 'of type function', fn);
    const currentIntervalFraction = this.elapsedFraction();
    return fn({
      prevSamples: this.#previous.cells.estimate(indexes),
      currSamples: this.#current.cells.estimate(indexes),
      intervalMs: this.intervalMs,
      currentIntervalFraction,
    });
  }

  /** How much of the current window has elapsed, in [0, 1]: the same for every key. */
  elapsedFraction(): number {
    const now = this.#now();
    this.#roll(now);
    return Math.min(1, Math.max(0, now / this.intervalMs - this.#current.index));
  }

  /** `key`'s count in the current window from this node's events alone. */
  local(key: Key): number {
    const indexes = this.#hasher.indexes(key);
    this.#roll(this.#now());
    return this.#current.cells.local(indexes);
  }

  /**
   * Live nodes syncing this rate (or quota) (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`).
   */
  get nodes(): number {
    return this.#census.nodes;
  }

  /** @internal The node count a quota's `'local'` share divides by: see `Census.shareNodes`. */
  get shareNodes(): number {
    return this.#census.shareNodes;
  }

  /**
   * @internal What the sync pushes and pulls: the current window and the previous one, the
   * current window's exact counts if it has any, and what older windows and the previous
   * window's exact counts hold that Redis may lack. An ended window that a sync still carries
   * pulls too, which no decision reads; it is dropped once nothing of it is pending (asked only
   * here, when no call carrying this rate is in flight: one that fails marks its cells again) or
   * once Redis has dropped its keys, when a push would only make them again for nobody.
   */
  entries(): SyncedEntry[] {
    const now = this.#now();
    this.#roll(now);
    this.#ended = this.#ended.filter((window) => now < this.#keysEnd(window.index) && pending(window));
    const entries: SyncedEntry[] = [];
    for (const window of this.#ended) {
      if (window.cells.pending) entries.push(window.cells);
      if (window.exact?.pending === true) entries.push(window.exact);
    }
    entries.push(this.#previous.cells, this.#current.cells);
    if (this.#previous.exact?.pending === true) entries.push(this.#previous.exact);
    // Exact counts sync from the window's start, tracked keys or not: a node that begins tracking
    // a key then already holds the others' counts of it.
    const exact = this.exactCells(true);
    if (exact !== undefined) entries.push(exact);
    return entries;
  }

  /**
   * @internal The id in exact counts (`exact.ts`) of the key this rate last hashed, by any of its
   * calls that take a key: read it right after one.
   */
  lastKeyId(): number {
    return this.#hasher.lastId;
  }

  /**
   * @internal Keeps exact counts of keys in each window from now on (a quota's heavy hitters):
   * from a fleet-wide estimate of `threshold`, up to `capacity` keys a window.
   */
  countExactly(threshold: number, capacity: number): ExactCounts {
    const counts = new ExactCounts(threshold, capacity, this.#hasher.layout);
    this.#exact = { counts, census: new Census(this.#sync) };
    return counts;
  }

  /**
   * @internal The previous and the current window's exact counts, each `undefined` when it has
   * none (made in the current window on first use, a previous one only if it was current here).
   */
  exactWindows(): [ExactCells | undefined, ExactCells | undefined] {
    const current = this.exactCells();
    return [this.#previous.exact, current];
  }

  /**
   * @internal The current window's exact counts (made on first use), or `undefined` when the rate
   * keeps none. Only the current window's: a fixed-window quota decides on nothing else. With
   * `rolled`, the caller has just moved to the current window (it counted): no clock read again.
   */
  exactCells(rolled = false): ExactCells | undefined {
    const exact = this.#exact;
    if (exact === undefined) return undefined;
    if (!rolled) this.#roll(this.#now());
    const window = this.#current;
    window.exact ??= new ExactCells(
      exact.counts.capacity,
      entryKeys(this.#base, `x${window.index}`, exact.counts.layout, 'x'),
      exact.census,
      this.#windowTtl(window.index),
    );
    return window.exact;
  }

  /**
   * Stops counting: `observe` (and a quota's `consume` and `adjust`) then throw
   * `ERR_KEEPCOUNT_CLOSED`, reads answer from the last state. What was counted before is pushed
   * by the next successful syncs (`sync.flush()`, the timer, or `sync.close()`), after which the
   * rate is no longer synced.
   */
  close(): void {
    this.#closed = true;
    this.#sync.retire(this);
  }

  /** Whether {@link close} ran: counting throws then, reads answer from the last state. */
  get closed(): boolean {
    return this.#closed;
  }

  #now(): number {
    const now = this.#clock.now();
    if (typeof now !== 'number' || !Number.isFinite(now)) {
      throw outOfRange("The clock's now()", 'a finite number of milliseconds', now);
    }
    return now;
  }

  #index(now: number): number {
    return Math.floor(now / this.intervalMs);
  }

  /**
   * Moves to the window `now` is in. A clock that went back stays in the later window (no time
   * passing, as `Rate`), except from windows placed before Redis's clock was known. Windows older
   * than the previous one that may hold counts Redis lacks are kept for the sync to push (see
   * {@link entries}), the newest {@link MAX_ENDED}; no decision reads them any more.
   */
  #roll(now: number): void {
    const index = this.#index(now);
    if (this.#provisional && this.#sync.serverTimeKnown) {
      this.#provisional = false;
      // Placed on a clock ahead of Redis's (most likely made before the first sync, as at start
      // up): staying would count apart from the fleet until Redis's clock caught up. What was
      // counted in the windows left behind and not yet pushed is dropped: pushed, it would count
      // in windows the fleet has not reached.
      if (index < this.#current.index) {
        this.#previous = this.#window(index - 1);
        this.#current = this.#window(index);
        this.#ended = [];
        return;
      }
    }
    if (index <= this.#current.index) return;
    // A window that ended keeps its exact counts only to list its top talkers, and to push them.
    this.#current.exact?.forgetOthers();
    const next = index === this.#current.index + 1;
    const left = next ? [this.#previous] : [this.#previous, this.#current];
    this.#ended.push(...left.filter(pending));
    if (this.#ended.length > MAX_ENDED) this.#ended = this.#ended.slice(-MAX_ENDED);
    this.#previous = next ? this.#current : this.#window(index - 1);
    this.#current = this.#window(index);
  }

  #window(index: number): Window {
    return {
      index,
      cells: new SyncedCells(
        this.#counters,
        entryKeys(this.#base, `w${index}`, this.#layout, 'w'),
        this.#census,
        this.#windowTtl(index),
        0,
        // A new incarnation keeps the others' counts known before as a floor for the window's
        // life (cells.ts `apply`): in a window they only grow, and the floor ends with it.
        Infinity,
      ),
    };
  }

  /** How long window `index`'s keys live after a sync: until {@link #keysEnd}. */
  #windowTtl(index: number): () => number {
    return () => Math.max(1, Math.ceil(this.#keysEnd(index) - this.#now()));
  }

  /**
   * When window `index`'s keys expire, on this rate's clock: at the end of window `index + 1`, the
   * last that reads it, on clocks up to the skew margin behind.
   */
  #keysEnd(index: number): number {
    return (index + 2) * this.intervalMs + SKEW_MARGIN_MS;
  }
}

/** Whether `window` may hold counts of this node's that Redis lacks, in its sketch or exact counts. */
function pending(window: Window): boolean {
  return window.cells.pending || window.exact?.pending === true;
}

/** The structures (kind and name) warned of a short window in this process: each once. */
const warnedShort = new Set<string>();

/**
 * Warns, once a process for each structure, that its windows (`windowMs` long, its option
 * `option`) are shorter than its sync's period: in such a window each node sees mostly its own
 * counts, which nothing else says (see {@link SyncedRate}).
 */
function warnShortWindow(kind: string, option: string, name: string, windowMs: number, syncMs: number): void {
  const key = `${kind}\n${name}`;
  if (warnedShort.has(key)) return;
  warnedShort.add(key);
  const consequence =
    kind === 'SyncedWindowQuota'
      ? 'each node admits up to the limit a window, and the fleet up to the limit times the nodes'
      : "its counts and rate() are mostly this node's own";
  process.emitWarning(
    `${kind} "${name}": its ${option} (${windowMs}) is shorter than its RedisSync's syncMs (${syncMs}). ` +
      "The nodes see each other's counts only at their syncs, so in a window this short they see " +
      `mostly their own: ${consequence}. Make ${option} several times syncMs, or syncMs shorter`,
    { type: 'KeepcountWarning', code: 'KEEPCOUNT_SHORT_WINDOW' },
  );
}
