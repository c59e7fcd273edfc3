/**
 * The node's link to Redis: a timer that, every `syncMs`, pushes every registered structure's
 * changed cells and pulls what the other nodes changed, in one script call (one round trip; in
 * a Redis Cluster, one call per structure name, sent together, since a script touches one slot).
 * Nothing here runs on a request's path: structures answer from their local arrays, and this
 * only refreshes them.
 */
import { EventEmitter, setMaxListeners } from 'node:events';
import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { invalidType, outOfRange, withCode, type KeepcountError } from '../errors.js';
import { integerOption, optionsObject } from '../options.js';
import type { Push, SyncedEntry } from './cells.js';
import type { LoanRequest } from './loan.js';
import { ServerClock } from './server-clock.js';
import { corruptKeyError, foreignKeyError, layoutError, nodeIdTakenError, parseReply } from './reply.js';
import { runSyncScript } from './script.js';
import type { SendCommand } from './send.js';
import type { RedisSyncOptions, SyncSource, SyncStats } from './sync-types.js';

/**
 * The `ERR_KEEPCOUNT_CLOSED` error of a synced structure counted after its `close()`: it would
 * never be pushed.
 */
export function closedSyncedError(what: string): KeepcountError {
  return withCode(
    new Error(`This ${what} was closed: it counts no more (what it counted before goes with the next sync)`),
    'ERR_KEEPCOUNT_CLOSED',
  );
}

/**
 * The `ERR_KEEPCOUNT_CLOSED` error of a synced structure counted after its sync's `close()`: no
 * sync would ever push the count, so the fleet would never see it.
 */
export function syncClosedError(what: string): KeepcountError {
  return withCode(
    new Error(`The RedisSync of this ${what} was closed: it counts no more, since no sync would push the count`),
    'ERR_KEEPCOUNT_CLOSED',
  );
}

const MAX_MS = 3_600_000;

/**
 * Most cells one entry pushes in one sync, and most it pulls (twice that, so that a pull cut short
 * still holds one whole push: see script.ts). The script does about six Redis operations per cell,
 * so this keeps one sync to a few milliseconds of the server's time; a node that changes more cells
 * per sync period pushes them over the next syncs, oldest first (nothing is lost, but a change
 * waits a sync per 2,048 ahead of it, which `staleness` does not count).
 */
const MAX_PUSH = 2048;
const MAX_PULL = 2 * MAX_PUSH;

/** Per layout registry, an entry it came with, the other layouts it named and its group's key. */
type Heard = Map<string, { entry: SyncedEntry; others: Set<string>; group?: string }>;

/**
 * The structures one script call carries: all of them, or, in a cluster, those of one name (one
 * hash tag). `key` is `''` for all, else the name.
 */
interface Group {
  key: string;
  names: string[];
  carried: { source: SyncSource; entries: SyncedEntry[]; placed: boolean }[];
  entries: SyncedEntry[];
  loans: LoanRequest[];
}

/** A coded error naming the structures of a failed call: `names`. */
export type SyncError = KeepcountError & { names?: string[] };

/** The registry keeps a node this many sync periods after its last sync. */
const LIVE_PERIODS = 10;

/**
 * Syncs keepcount structures through Redis ≥ 7 (or Valkey). Emits `'sync'` after each successful
 * sync and `'error'` (only when someone listens: an unheard `'error'` would throw from a timer)
 * with an `ERR_KEEPCOUNT_SYNC` error for each failed call (in a cluster, one per name: a sync whose
 * calls partly failed keeps what they did apply and counts as failed), naming its structures in
 * its message and `names` and holding what the client rejected with as `cause` (an error that
 * already has a keepcount code, such as `ERR_KEEPCOUNT_NODE_ID`, comes as it is). In a cluster a
 * name whose call is still in flight (its master hung or migrating) is left out of the next syncs
 * until that call ends (replied or timed out): the other names sync every `syncMs` meanwhile, and
 * each structure goes stale on its own (see {@link staleness}). Also emits `'error'` with an
 * `ERR_KEEPCOUNT_FOREIGN_KEY` error for each key under the prefix that held another Redis type
 * (someone else wrote there): the sync deleted it and went on, the structure rebuilding it as
 * after a loss (see script.ts);
 * and with an `ERR_KEEPCOUNT_LAYOUT` error when nodes made with another seed, shape or sketch
 * format sync a structure of the same name (the two groups count apart), once per other layout
 * until it stops syncing. Its timer is unref'd: it never keeps the process alive.
 */
export class RedisSync extends EventEmitter {
  /** Milliseconds between syncs. */
  readonly syncMs: number;
  /** Milliseconds a sync's call may take. */
  readonly timeoutMs: number;
  /** Milliseconds of staleness after which the fail policies apply. */
  readonly staleAfterMs: number;
  /** This node's id. */
  readonly nodeId: string;
  /** Prefix of every key. */
  readonly prefix: string;
  /** Whether syncs are split by hash tag for a Redis Cluster. */
  readonly cluster: boolean;
  readonly #send: SendCommand;
  readonly #sources = new Set<SyncSource>();
  /** Closed structures still in {@link #sources} until what they counted is pushed: see {@link retire}. */
  readonly #retiring = new Set<SyncSource>();
  /** The running calls' deadlines, referenced once {@link close} waits on them. */
  readonly #deadlines = new Set<NodeJS.Timeout>();
  /** Each structure's name, which is its keys' hash tag. */
  readonly #names = new Map<SyncSource, string>();
  /**
   * Each structure's last success: when the last call carrying it succeeded (in a cluster; else
   * the sync's, {@link #lastSuccess}). Set to {@link #lastSuccess} when it is added.
   */
  readonly #fresh = new Map<SyncSource, number>();
  /**
   * The groups ({@link Group}) with a call in flight, settled (its bookkeeping done) when it ends.
   * A sync leaves them out: an entry has one call in flight at a time (its cells taken once, its
   * sequence numbers in order), and a hung master holds back only its own names.
   */
  readonly #busy = new Map<string, Promise<boolean>>();
  /** Per group, the live nodes its last successful call counted. */
  readonly #nodesBy = new Map<string, number>();
  /** The kind and name of every structure ever added, closed ones included: see {@link add}. */
  readonly #claimed = new Set<string>();
  readonly #timer: NodeJS.Timeout;
  /**
   * Tells this process's syncs from another's under the same `nodeId` (a restart given a fixed
   * id): Redis keeps a node's record for the process that wrote it, whatever the sequence numbers.
   */
  readonly #process = randomUUID();
  #seq = 0;
  /** The last sync that carried every structure and succeeded (or construction, before the first). */
  #lastSuccess = performance.now();
  /** When a call last succeeded (in a cluster, of any name): where a new structure's freshness starts. */
  #lastCall = this.#lastSuccess;
  /** Redis's clock, which synced windows are fixed on. */
  readonly #serverClock = new ServerClock();
  #running: Promise<boolean> | undefined;
  #closing: Promise<boolean> | undefined;
  /**
   * Aborted by {@link close}: ends the waits of {@link ready} between its tries, which would
   * otherwise hold the process open for up to a `syncMs` (an hour at most) after the sync closed.
   */
  readonly #closed = new AbortController();
  /**
   * The refusal of the last failed sync, if Redis refused it for this node's id for good (on an
   * entry whose record has no lease and never expires: a `SyncedEstimator`'s): {@link ready}
   * rejects with it rather than wait for ever. A refusal that a lease or a window ends waits.
   */
  readonly #idRefused = new Map<string, Error>();
  /** The node-id refusals that no lease or expiry ends ({@link #idRefused}). */
  readonly #refusedForGood = new WeakSet<object>();
  /**
   * The other layouts each layout registry named at the last sync, so that a misconfiguration is
   * reported once, not every sync (and again if it goes away and comes back).
   */
  #heard: Heard = new Map();
  /**
   * The structures that hold what the others had counted when this node joined: every entry the
   * first successful sync carrying them carried has caught up ({@link SyncedEntry.caughtUp}) or
   * ended (a window since rotated out). What {@link ready} waits for. Only those entries: a window
   * that begins later is new to every node alike, and under a flood that outruns the pulls its
   * catch-up could take longer than the window lasts, window after window, and `ready()` would
   * wait as long as the flood (1 s windows at `syncMs` 1,000 with three flooding nodes).
   */
  readonly #caughtUp = new WeakSet<SyncSource>();
  /** For each structure not yet {@link #caughtUp}: the entries of its first sync still catching up. */
  readonly #joining = new WeakMap<SyncSource, SyncedEntry[]>();
  readonly #stats: SyncStats = {
    syncs: 0,
    failures: 0,
    commands: 0,
    cellsPushed: 0,
    cellsPulled: 0,
    lastRoundTripMs: 0,
    backlog: 0,
    behind: 0,
  };

  constructor(options: RedisSyncOptions) {
    super();
    // Every waiting ready() listens on it, and a readiness probe may call ready() many times.
    setMaxListeners(0, this.#closed.signal);
    const o = optionsObject(options);
    if (typeof o.sendCommand !== 'function') {
      throw invalidType('The "sendCommand" option', 'of type function', o.sendCommand);
    }
    this.#send = o.sendCommand;
    this.syncMs = integerOption('syncMs', o.syncMs, 1, MAX_MS, 100);
    this.timeoutMs = integerOption('timeoutMs', o.timeoutMs, 1, MAX_MS, 1000);
    const staleAfterMs = Math.min(this.timeoutMs + this.syncMs, MAX_MS);
    this.staleAfterMs = integerOption('staleAfterMs', o.staleAfterMs, 1, MAX_MS, staleAfterMs);
    this.prefix = nameOption('prefix', o.prefix ?? 'keepcount');
    this.nodeId = nameOption('nodeId', o.nodeId ?? randomUUID());
    if (o.cluster !== undefined && typeof o.cluster !== 'boolean') {
      throw invalidType('The "cluster" option', 'of type boolean', o.cluster);
    }
    this.cluster = o.cluster ?? false;
    this.#timer = setInterval(() => this.#tick(), this.syncMs).unref();
  }

  /**
   * Milliseconds since the last successful sync (or since construction, before the first): the
   * staleness of its stalest structure. Each structure is as fresh as the last successful call
   * carrying it and decides its fail policy on that alone; without `cluster` one call carries them
   * all, so they are all as stale as the sync. In a cluster, a hung master leaves the structures of
   * its names stale and this with them, while those on the other masters sync on and stay fresh.
   */
  get staleness(): number {
    if (!this.cluster || this.#sources.size === 0) return performance.now() - this.#lastSuccess;
    let oldest = Infinity;
    for (const source of this.#sources) oldest = Math.min(oldest, this.#fresh.get(source) ?? this.#lastSuccess);
    return performance.now() - oldest;
  }

  /** Whether {@link staleness} is over `staleAfterMs`: whether any structure on this sync is stale. */
  get stale(): boolean {
    return this.staleness > this.staleAfterMs;
  }

  /**
   * @internal Whether `source` is stale: no call carrying it has succeeded for `staleAfterMs`
   * (without `cluster`, {@link stale}). What its fail policy goes by.
   */
  staleFor(source: SyncSource): boolean {
    if (!this.cluster) return this.stale;
    return performance.now() - (this.#fresh.get(source) ?? this.#lastSuccess) > this.staleAfterMs;
  }

  /** Whether a sync has reached Redis yet (until then {@link nodes} is only this one). */
  get synced(): boolean {
    return this.#stats.syncs > 0;
  }

  /**
   * The most live nodes any structure on this sync counted at the last successful sync (at least
   * 1; in a cluster, at each name's last successful call). Each structure divides by its own count (its `nodes`), which a fleet where structures
   * run on different sets of nodes makes differ; this is what a structure not yet synced uses.
   */
  get nodes(): number {
    return Math.max(1, ...this.#nodesBy.values());
  }

  /** A copy of the counters. */
  get stats(): SyncStats {
    return { ...this.#stats };
  }

  /**
   * @internal Structures register here; they are synced until {@link remove}d. A node's counts
   * in Redis are its cumulative contribution under its node id, so a second structure of the
   * same `kind` and `name` on this sync, even after the first was closed, would overwrite them
   * with its own, or see its pushes refused as stale: it is refused here.
   */
  add(source: SyncSource, kind: string, name: string): void {
    const claim = `${kind}\n${name}`;
    if (this.#claimed.has(claim)) {
      throw withCode(
        new Error(
          `A ${kind} named "${name}" was already made on this RedisSync: its counts in Redis are this node's, ` +
            'and a second one would overwrite them. Share the first, or give the second its own RedisSync',
        ),
        'ERR_KEEPCOUNT_DUPLICATE_KEY',
      );
    }
    this.#claimed.add(claim);
    this.#sources.add(source);
    this.#names.set(source, name);
    // In a cluster, as fresh as the sync's latest successful call: the last sync that carried
    // every name may be long past while one master is down, and a structure made then on a
    // healthy master would start out stale (a 'closed' quota refusing until its first call).
    this.#fresh.set(source, this.cluster ? Math.max(this.#lastSuccess, this.#lastCall) : this.#lastSuccess);
  }

  /** @internal The sequence number of the last sync sent (0: none yet). */
  get sequence(): number {
    return this.#seq;
  }

  /** @internal Stops syncing `source` now: what it has not pushed stays unpushed. */
  remove(source: SyncSource): void {
    this.#sources.delete(source);
    this.#fresh.delete(source);
    this.#names.delete(source);
  }

  /**
   * @internal Stops syncing `source`, which counts no more, once everything it counted has been
   * pushed: after the first successful sync that leaves none of its cells waiting. Closing a
   * structure before its sync (the natural order at shutdown) then loses nothing.
   */
  retire(source: SyncSource): void {
    if (this.#sources.has(source)) this.#retiring.add(source);
  }

  /**
   * Syncs now (or waits for the sync under way): resolves with whether it succeeded. Never
   * rejects; the timer calls this every `syncMs`. In a cluster a sync leaves out the names whose
   * call from an earlier sync is still in flight (see {@link RedisSync}) and then resolves false,
   * though it emits `'sync'` and counts in `stats.syncs` if every call it made succeeded.
   */
  flush(): Promise<boolean> {
    this.#running ??= this.#start();
    return this.#running;
  }

  /**
   * The timer's sync. In a cluster, a sync still waiting on a name's call (a hung master's, until
   * `timeoutMs`) does not hold back the names whose calls are done: a new sync carries them.
   */
  #tick(): void {
    if (this.#running !== undefined && this.cluster && this.#idle()) this.#running = this.#start();
    else void this.flush();
  }

  #start(): Promise<boolean> {
    const sync: Promise<boolean> = this.#sync().finally(() => {
      if (this.#running === sync) this.#running = undefined;
    });
    return sync;
  }

  /** Whether a structure's group has no call in flight. */
  #idle(): boolean {
    for (const source of this.#sources) if (!this.#busy.has(this.#groupOf(source))) return true;
    return false;
  }

  /** The key of `source`'s {@link Group}. */
  #groupOf(source: SyncSource): string {
    return this.cluster ? (this.#names.get(source) ?? '') : '';
  }

  /**
   * Resolves once every structure on this sync is ready to serve (await it after making them: with
   * none, no sync reaches Redis and it waits for one): a sync has succeeded; every entry the
   * first one carried (a sketch, each window of a rate or quota) holds what the others had counted
   * in it then, or has ended, a sync per 4,096 changed cells, as a pull carries no more (after
   * one sync, a node joining a busy window admitted a client the others had brought to its limit),
   * or, while its pulls are cut short, once a scan of its counts in Redis, about 4,096 a sync, has
   * gone through them (cells.ts `PulledEntry`: a count changed again while the pulls catch up
   * moves ahead of them, and a node that waited only for the pulls read a busy key as 0); and
   * each `SyncedLimiter` has counted the nodes that started with this one, which takes a sync
   * sent a sync period after its first (before that it lends itself no credit: see
   * `SyncedLimiter`). What the others change meanwhile comes in as for any node: a flood that
   * outruns the pulls delays that ({@link SyncStats.behind}), not this. Await it before serving.
   * A failed sync is tried again every `syncMs`, so it waits as long as Redis cannot be reached;
   * rejects with `ERR_KEEPCOUNT_CLOSED` if the sync is closed first, and with
   * `ERR_KEEPCOUNT_NODE_ID` if Redis refuses this node's id for good (another process synced a
   * `SyncedEstimator` under it, whose record never expires); a refusal that the other process's
   * lease or windows end, it waits out.
   */
  async ready(): Promise<void> {
    for (;;) {
      if (this.#closing !== undefined) {
        throw withCode(new Error('This RedisSync was closed before it was ready'), 'ERR_KEEPCOUNT_CLOSED');
      }
      const clockKnown = this.serverTimeKnown;
      // `synced`: a sync that reached Redis (with no structure yet, a flush sends nothing).
      const flushed = (await this.flush()) && this.synced;
      const refused = this.#idRefused.values().next().value;
      if (!flushed && refused !== undefined) throw refused;
      const ready = (source: SyncSource) => this.#caughtUp.has(source) && (source.ready?.() ?? true);
      if (flushed && [...this.#sources].every(ready)) return;
      // Windows placed before Redis's clock was known do not count for catching up (see #sync):
      // the next sync, at once, places them on it.
      if (flushed && !clockKnown) continue;
      // Referenced, unlike the sync's own timer: the caller is waiting on it. Cut short by close(),
      // after which the next turn rejects.
      await delay(this.syncMs, undefined, { signal: this.#closed.signal }).catch(() => undefined);
    }
  }

  /**
   * Stops the timer after one last sync; structures keep answering from their local state, but
   * counts on its synced sketches and rates throw `ERR_KEEPCOUNT_CLOSED` from the call on, since
   * nothing would push them. A quota's `consume` does not: it decides on this node's counts by its
   * fail policy (a server draining requests at shutdown answers them), and a `SyncedInflight`
   * keeps counting on this node's slots, for the same reason; close the sync once the server
   * stops taking requests all the same, or the fleet never sees them.
   * Resolves with whether that sync succeeded; every call resolves with it once it is done, so a
   * second shutdown hook cannot let the process exit before the last push. It waits for the sync
   * under way first (whose counts were taken before the call), each up to `timeoutMs`: at most
   * twice `timeoutMs` in all. In a cluster that includes a name's call still in flight from an
   * earlier sync (a hung master's): the last sync carries every structure.
   */
  close(): Promise<boolean> {
    this.#closed.abort();
    this.#closing ??= this.#close();
    return this.#closing;
  }

  /**
   * Redis's wall clock in epoch milliseconds, as this node estimates it from its syncs' replies
   * (within half the quickest recent round trip, on this process's monotonic clock): what synced
   * rates and quotas fix their windows on, so that every node's windows agree whatever its own
   * clock reads. This process's `Date.now()` before the first sync.
   */
  now(): number {
    return this.#serverClock.now();
  }

  /** @internal Whether a sync's reply told Redis's time ({@link now} reads it from then on). */
  get serverTimeKnown(): boolean {
    return this.#serverClock.known;
  }

  /** True once {@link close} was called: the synced sketches and rates on it count no more (see {@link close}). */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  async #close(): Promise<boolean> {
    clearInterval(this.#timer);
    // A sync's deadline is unreferenced so that syncing alone never keeps the process alive; the
    // last one is awaited by whoever closes, so a hung sender must not let the process exit first.
    for (const deadline of this.#deadlines) deadline.ref();
    while (this.#running !== undefined || this.#busy.size > 0) {
      await this.#running;
      await Promise.all(this.#busy.values());
    }
    return this.flush();
  }

  /**
   * One sync: a script call per group ({@link Group}: one for all, or one per name in a cluster)
   * but those with a call in flight, which it leaves out. Succeeds when every call it made did and
   * it left none out; each call's bookkeeping is its own ({@link #settle}).
   */
  async #sync(): Promise<boolean> {
    let groups: Group[];
    let skipped = false;
    try {
      const byKey = new Map<string, SyncSource[]>();
      for (const source of [...this.#sources]) {
        const key = this.#groupOf(source);
        if (this.#busy.has(key)) skipped = true;
        else byKey.set(key, [...(byKey.get(key) ?? []), source]);
      }
      this.#forgetGone();
      groups = [...byKey].map(([key, sources]) => {
        const carried = sources.map((source) => ({
          source,
          entries: source.entries(),
          placed: source.placed?.() ?? true,
        }));
        const names = [...new Set(sources.map((source) => this.#names.get(source) ?? ''))];
        const entries = carried.flatMap((c) => c.entries);
        return { key, names, carried, entries, loans: [] as LoanRequest[] };
      });
      for (const group of groups) group.loans = group.carried.flatMap((c) => c.source.loans?.() ?? []);
    } catch (error) {
      this.#stats.failures++;
      this.#report(error);
      return false;
    }
    // Groups with nothing to push or ask for are in sync as they are.
    const now = performance.now();
    for (const group of groups.filter((g) => g.entries.length === 0 && g.loans.length === 0)) {
      for (const { source } of group.carried) if (this.#fresh.has(source)) this.#fresh.set(source, now);
      this.#dropSettled(group.carried);
    }
    const sent = groups.filter((g) => g.entries.length > 0 || g.loans.length > 0);
    if (sent.length === 0) {
      if (!skipped) this.#lastSuccess = now;
      return !skipped;
    }
    const seq = String(++this.#seq);
    const started = performance.now();
    const results = await Promise.all(sent.map((group) => this.#call(group, seq, started)));
    if (!results.every(Boolean)) {
      this.#stats.failures++;
      return false;
    }
    const done = performance.now();
    if (!skipped) this.#lastSuccess = done;
    this.#stats.syncs++;
    this.#stats.lastRoundTripMs = done - started;
    const entries = sent.flatMap((group) => group.entries);
    this.#stats.backlog = entries.reduce((sum, entry) => sum + entry.waiting, 0);
    this.#stats.behind = entries.filter((entry) => entry.behind).length;
    this.#notify('sync');
    return !skipped;
  }

  /**
   * Forgets the node counts and layouts heard for names no structure syncs any more (in a cluster).
   * With none left it keeps them, as the sync did before names ran apart: `nodes` is what a
   * structure added next divides its limit by until its first sync (a 'local' quota made while
   * Redis is away), and one name's count stands for the fleet's then.
   */
  #forgetGone(): void {
    if (!this.cluster || this.#sources.size === 0) return;
    const keys = new Set([...this.#sources].map((source) => this.#groupOf(source)));
    for (const key of this.#nodesBy.keys()) if (!keys.has(key)) this.#nodesBy.delete(key);
    for (const [layouts, heard] of this.#heard) if (!keys.has(heard.group ?? '')) this.#heard.delete(layouts);
  }

  /**
   * Sends `group`'s call, its group busy until it ends; resolves (never rejects) with whether it
   * succeeded, once its bookkeeping is done.
   */
  #call(group: Group, seq: string, started: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(timeoutError(this.timeoutMs, group.names, this.cluster)), this.timeoutMs);
      if (!this.#closed.signal.aborted) timer.unref();
      this.#deadlines.add(timer);
    });
    const end = () => {
      clearTimeout(timer);
      this.#deadlines.delete(timer as NodeJS.Timeout);
      this.#busy.delete(group.key);
    };
    const call = this.#syncGroup(group.entries, group.loans, seq, timeout, started).then(
      (result) => {
        end();
        try {
          this.#settle(group, result);
          return true;
        } catch (error) {
          this.#report(error);
          return false;
        }
      },
      (error: unknown) => {
        end();
        try {
          if (this.#refusedForGood.has(error as object)) this.#idRefused.set(group.key, error as Error);
          else this.#idRefused.delete(group.key);
          this.#report(syncError(error, group.names));
        } catch (failure) {
          // Reporting must not reject the sync: the timer's flush() is not awaited.
          this.#report(failure);
        }
        return false;
      },
    );
    this.#busy.set(group.key, call);
    return call;
  }

  /** The bookkeeping of `group`'s call that succeeded. */
  #settle(group: Group, result: { nodes: number; keyErrors: Error[]; layouts: Heard }): void {
    this.#idRefused.delete(group.key);
    this.#nodesBy.set(group.key, result.nodes);
    for (const error of result.keyErrors) this.#report(error);
    // The group's registries named these layouts now; those it named before and no longer go.
    for (const [key, now] of result.layouts) {
      const before = this.#heard.get(key)?.others;
      for (const theirs of now.others) {
        if (before?.has(theirs) !== true) this.#report(layoutError(now.entry, theirs, this.syncMs * LIVE_PERIODS));
      }
    }
    for (const [key, heard] of this.#heard) if ((heard.group ?? '') === group.key) this.#heard.delete(key);
    for (const [key, now] of result.layouts) this.#heard.set(key, { ...now, group: group.key });
    const done = performance.now();
    this.#lastCall = done;
    for (const c of group.carried) {
      if (this.#fresh.has(c.source)) this.#fresh.set(c.source, done);
      // Windows placed on this process's clock may be others than the fleet's (SyncSource.placed).
      if (!c.placed || this.#caughtUp.has(c.source)) continue;
      const joining = (this.#joining.get(c.source) ?? c.entries).filter(
        (entry) => !entry.caughtUp && c.entries.includes(entry),
      );
      if (joining.length === 0) {
        this.#caughtUp.add(c.source);
        this.#joining.delete(c.source);
      } else this.#joining.set(c.source, joining);
    }
    this.#dropSettled(group.carried);
  }

  /** Stops syncing the retired structures of `carried` with nothing left to push ({@link retire}). */
  #dropSettled(carried: { source: SyncSource }[]): void {
    for (const { source } of carried) {
      if (!this.#retiring.has(source)) continue;
      if (source.entries().every((entry) => entry.waiting === 0)) {
        this.#sources.delete(source);
        this.#retiring.delete(source);
        this.#fresh.delete(source);
        this.#names.delete(source);
      }
    }
  }

  /**
   * One script call for `entries` and `loans` (keys of one hash slot in a cluster): pushes their
   * changed cells, takes in their pulls and the tokens lent; resolves with the live node count and
   * an error for each key of another type, or entry of corrupt values, the script deleted. A failure marks the cells it would
   * have pushed to go with the next sync, tells the loans, and rejects.
   */
  async #syncGroup(
    entries: SyncedEntry[],
    loans: LoanRequest[],
    seq: string,
    timeout: Promise<never>,
    started: number,
  ): Promise<{ nodes: number; keyErrors: Error[]; layouts: Heard }> {
    const pushes = entries.map((entry) => entry.take(MAX_PUSH));
    try {
      const keys: string[] = [];
      const args = [
        this.nodeId,
        String(this.syncMs * LIVE_PERIODS),
        String(MAX_PULL),
        String(entries.length),
        this.#process,
      ];
      entries.forEach((entry, k) => {
        const push = pushes[k] as Push;
        keys.push(entry.keys.base, entry.keys.registry, entry.keys.layouts);
        args.push(seq, String(entry.acked), String(entry.since), String(entry.ttlMs()), String(entry.leaseMs));
        args.push(entry.keys.layout, entry.scan);
        args.push(String(push.cells.length));
        push.cells.forEach((cell, j) => args.push(String(cell), push.values[j] as string));
      });
      for (const loan of loans) {
        keys.push(loan.key);
        args.push(seq, String(loan.rate), String(loan.burst), String(loan.cap), String(loan.leaseMs));
        args.push(String(loan.ttlMs), String(loan.held), String(loan.want), String(loan.got));
      }
      const sentAt = performance.now();
      const reply = await Promise.race([runSyncScript(this.#count, keys, args), timeout]);
      const { pulls, lent, left, foreign, corrupt, serverMs } = parseReply(reply, entries.length, loans.length);
      this.#serverClock.heard(serverMs, sentAt, performance.now());
      // Not one entry of this sync was applied, nor will any later one be while the other
      // process runs: a failed sync (stale, then the fail policies), not a silent loss.
      if (pulls.some((pull) => pull.idTaken) || lent.some((tokens) => tokens === -2)) {
        const error = nodeIdTakenError(this.nodeId);
        const forGood = pulls.some((pull, k) => pull.idTaken && entries[k]!.leaseMs === 0 && entries[k]!.ttlMs() === 0);
        if (forGood) this.#refusedForGood.add(error);
        throw error;
      }
      let nodes = 1;
      const layouts: Heard = new Map();
      pulls.forEach((pull, k) => {
        const entry = entries[k] as SyncedEntry;
        entry.apply(pull, Number(seq), sentAt);
        nodes = Math.max(nodes, pull.nodes);
        this.#stats.cellsPulled += pull.cells.length;
        layouts.set(entry.keys.layouts, { entry, others: new Set(pull.layouts) });
      });
      for (const push of pushes) this.#stats.cellsPushed += push.cells.length;
      loans.forEach((loan, k) => loan.lent(lent[k] as number, left[k] as number, started, Number(seq)));
      const keyErrors = [
        ...foreign.map(({ key, type }) => foreignKeyError(key, type, this.prefix)),
        ...corrupt.map(({ key, reason }) => corruptKeyError(key, reason, this.prefix)),
      ];
      return { nodes, keyErrors, layouts };
    } catch (error) {
      pushes.forEach((push, k) => (entries[k] as SyncedEntry).restore(push));
      for (const loan of loans) loan.failed();
      throw error;
    }
  }

  /** Emits `error` on `'error'` if anyone listens (an emitter with none would throw it). */
  #report(error: unknown): void {
    if (this.listenerCount('error') > 0) this.#notify('error', error);
  }

  /**
   * Emits `event`. A listener that throws is the program's bug, not the sync's: it goes on as an
   * uncaught exception, as from Node's own emitters, and never turns a sync into a failure, makes
   * `flush()` reject, or comes back to the `'error'` listeners.
   */
  #notify(event: 'sync' | 'error', ...args: unknown[]): void {
    try {
      this.emit(event, ...args);
    } catch (error) {
      process.nextTick(() => {
        throw error;
      });
    }
  }

  /** The sender, counting commands; a sender that throws instead of rejecting is caught too. */
  readonly #count: SendCommand = (command) => {
    this.#stats.commands++;
    try {
      // A reply that comes after the timeout gave up on it must not be an unhandled rejection.
      const reply = Promise.resolve(this.#send(command));
      reply.catch(() => undefined);
      return reply;
    } catch (error) {
      return Promise.reject(error);
    }
  };
}

/** The names in an error's message: the first few, and how many more. */
function listNames(names: string[]): string {
  const shown = names.slice(0, 5).map((name) => JSON.stringify(name));
  if (names.length > shown.length) shown.push(`and ${names.length - shown.length} more`);
  return shown.join(', ');
}

/** The `ERR_KEEPCOUNT_SYNC` error of a call that timed out; naming its structures in a cluster. */
function timeoutError(ms: number, names: string[], cluster: boolean): SyncError {
  const of = cluster ? ` for ${listNames(names)}` : '';
  return Object.assign(withCode(new Error(`Redis sync timed out after ${ms} ms${of}`), 'ERR_KEEPCOUNT_SYNC'), {
    names,
  });
}

/**
 * A failed call's error as reported: one with a keepcount code as it is, anything else (a client's
 * rejection: MOVED, TRYAGAIN, CLUSTERDOWN, a lost connection) as an `ERR_KEEPCOUNT_SYNC` error
 * naming the call's structures, the original as its `cause`.
 */
function syncError(error: unknown, names: string[]): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('ERR_KEEPCOUNT_')) {
    // An unexpected reply (reply.ts) names its call's structures too.
    if (code === 'ERR_KEEPCOUNT_SYNC' && (error as SyncError).names === undefined)
      Object.assign(error as object, { names });
    return error;
  }
  const message = error instanceof Error ? error.message : describeReason(error);
  const wrapped = withCode(
    new Error(`Redis sync of ${listNames(names)} failed: ${message}`, { cause: error }),
    'ERR_KEEPCOUNT_SYNC',
  );
  return Object.assign(wrapped, { names });
}

/**
 * A rejection reason that is not an `Error`, as text: `String()` throws for some (an object with
 * no prototype), and a throw while reporting a failed call would reject `flush()`, which the
 * timer does not catch.
 */
function describeReason(reason: unknown): string {
  try {
    return String(reason);
  } catch {
    return Object.prototype.toString.call(reason);
  }
}

/**
 * Longest `leaseMs` of a synced structure: two hours, twice the longest `syncMs`, so that a lease
 * can outlast a sync period whatever it is (at one hour the option had no valid value, an
 * integer in [3,600,001, 3,600,000], with `syncMs` at its most).
 */
const MAX_LEASE_MS = 7_200_000;

/**
 * A synced structure's `leaseMs` on `sync`: given, an integer in (`syncMs`, 7,200,000]; else the
 * sync's `staleAfterMs`, but never below `syncMs + timeoutMs`. A lease of `staleAfterMs` alone
 * could be at or below `syncMs` (a `staleAfterMs` of 200 with syncs every 200 ms), which the
 * option itself refuses: such a lease runs out between two syncs that come on time, and the other
 * nodes drop a live node's slots or loans over and over.
 */
export function leaseMsOption(value: unknown, sync: RedisSync): number {
  const fallback = Math.min(Math.max(sync.staleAfterMs, sync.syncMs + sync.timeoutMs), MAX_LEASE_MS);
  return integerOption('leaseMs', value, sync.syncMs + 1, MAX_LEASE_MS, fallback);
}

/** A key component: a non-empty string without `{` or `}`, which would move the hash tag. */
export function nameOption(name: string, value: unknown): string {
  if (typeof value !== 'string') throw invalidType(`The "${name}" option`, 'of type string', value);
  if (value.length === 0 || /[{}]/.test(value)) {
    throw outOfRange(`The "${name}" option`, 'a non-empty string without { or }', value);
  }
  return value;
}
