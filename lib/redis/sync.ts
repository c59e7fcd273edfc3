/**
 * The node's link to Redis: a timer that, every `syncMs`, pushes every registered structure's
 * changed cells and pulls what the other nodes changed, in one script call (one round trip; in
 * a Redis Cluster, one call per structure name, sent together, since a script touches one slot).
 * Nothing here runs on a request's path: structures answer from their local arrays, and this
 * only refreshes them.
 */
import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import { withCode } from '../errors.js';
import { SyncGroups, type Group } from './groups.js';
import { ServerClock } from './server-clock.js';
import type { SendCommand } from './send.js';
import { syncConfig } from './sync-options.js';
import type { RedisSyncOptions, SyncSource, SyncStats } from './sync-types.js';

/**
 * Syncs keepcount structures through Redis ≥ 7 (or Valkey). Emits `'sync'` after each successful
 * sync and `'error'` (only when someone listens: an unheard `'error'` would throw from a timer)
 * with an `ERR_KEEPCOUNT_SYNC` error for each failed call (in a cluster, one per name: a sync whose
 * calls partly failed keeps what they did apply and counts as failed), naming its structures in
 * its message and `names` and holding what the client rejected with as `cause`, whatever its
 * `code` (the errors the sync makes itself come as they are: a timeout, an unexpected reply,
 * `ERR_KEEPCOUNT_NODE_ID`). In a cluster a name whose call is still in flight (its master hung
 * or migrating) is left out of the next syncs until that call ends (replied or timed out): the
 * other names sync every `syncMs` meanwhile, and each structure goes stale on its own (see
 * {@link staleness}). Also emits `'error'` with an
 * `ERR_KEEPCOUNT_FOREIGN_KEY` error for each key under the prefix that held another Redis type
 * (someone else wrote there): the sync deleted it and went on, the structure rebuilding it as
 * after a loss (see script.ts);
 * and with an `ERR_KEEPCOUNT_LAYOUT` error when nodes made with another seed, shape or sketch
 * format sync a structure of the same name (the two groups count apart), once per other layout
 * until it stops syncing. Its timer is unref'd: it never keeps the process alive, but while a
 * {@link ready} call waits on its syncs.
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
  /** The structures on this sync and the bookkeeping of their calls. */
  readonly #groups: SyncGroups;
  /** The kind and name of every structure ever added, closed ones included: see {@link add}. */
  readonly #claimed = new Set<string>();
  readonly #timer: NodeJS.Timeout;
  #seq = 0;
  /** Redis's clock, which synced windows are fixed on. */
  readonly #serverClock = new ServerClock();
  #running: Promise<boolean> | undefined;
  #closing: Promise<boolean> | undefined;
  /** Aborted by {@link close}: a call's deadline then keeps the process alive (groups.ts). */
  readonly #closed = new AbortController();
  /**
   * Whether the last sync failed (or left out a name whose call was in flight): {@link ready}
   * then waits for the timer's next sync, which tries again, rather than sync at once.
   */
  #failing = false;
  /**
   * Settled with its result when the next sync ends, or with false when the sync closes: what a
   * waiting {@link ready} awaits. Each sync that ends makes a new one.
   */
  #ended = settleable();
  /** The {@link ready} calls waiting: while there are any, the timer keeps the process alive. */
  #waiters = 0;
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
    const config = syncConfig(options);
    this.#send = config.send;
    this.syncMs = config.syncMs;
    this.timeoutMs = config.timeoutMs;
    this.staleAfterMs = config.staleAfterMs;
    this.prefix = config.prefix;
    this.nodeId = config.nodeId;
    this.cluster = config.cluster;
    this.#groups = new SyncGroups({
      nodeId: this.nodeId,
      prefix: this.prefix,
      syncMs: this.syncMs,
      timeoutMs: this.timeoutMs,
      cluster: this.cluster,
      process: randomUUID(),
      send: this.#count,
      serverClock: this.#serverClock,
      stats: this.#stats,
      closed: this.#closed.signal,
      report: (error) => this.#report(error),
      // Sequence numbers need only go up per process (script.ts `SEQ_SPAN`).
      numberPast: (seq) => (this.#seq = Math.max(this.#seq, Math.floor(seq))),
    });
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
    return performance.now() - this.#groups.freshAt();
  }

  /**
   * Whether {@link staleness} is over `staleAfterMs`: whether any structure on this sync is stale.
   */
  get stale(): boolean {
    return this.staleness > this.staleAfterMs;
  }

  /**
   * @internal Whether `source` is stale: no call carrying it has succeeded for `staleAfterMs`
   * (without `cluster`, {@link stale}). What its fail policy goes by.
   */
  staleFor(source: SyncSource): boolean {
    return performance.now() - this.freshAt(source) > this.staleAfterMs;
  }

  /**
   * @internal When `source` last synced, which {@link staleFor} counts from: `performance.now()`
   * when a call carrying it last succeeded, its bookkeeping done (without `cluster`, the last sync
   * that carried every structure), or when it was added, before that. It changes only as a call
   * makes `source` fresh again, so it names a spell of staleness from its first stale check to its
   * end (a `SyncedLimiter`'s `'local'` bucket goes by it).
   */
  freshAt(source: SyncSource): number {
    return this.#groups.freshAt(source);
  }

  /** Whether a sync has reached Redis yet (until then {@link nodes} is only this one). */
  get synced(): boolean {
    return this.#stats.syncs > 0;
  }

  /**
   * The most live nodes any structure on this sync counted at the last successful sync (at least
   * 1; in a cluster, at each name's last successful call). Each structure divides by its own count
   * (its `nodes`), which a fleet where structures run on different sets of nodes makes differ; this
   * is what a structure not yet synced uses.
   */
  get nodes(): number {
    return this.#groups.nodes;
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
    this.#groups.add(source, name);
  }

  /**
   * @internal The sequence number of the last sync sent (0: none yet), or one Redis held for this
   * process past it (script.ts `SEQ_SPAN`): the next sync's is one more.
   */
  get sequence(): number {
    return this.#seq;
  }

  /** @internal Stops syncing `source` now: what it has not pushed stays unpushed. */
  remove(source: SyncSource): void {
    this.#groups.remove(source);
  }

  /**
   * @internal Stops syncing `source`, which counts no more, once everything it counted has been
   * pushed: after the first successful sync that leaves none of its cells waiting. Closing a
   * structure before its sync (the natural order at shutdown) then loses nothing.
   */
  retire(source: SyncSource): void {
    this.#groups.retire(source);
  }

  /**
   * Syncs now (or waits for the sync under way): resolves with whether it succeeded. Never
   * rejects; the timer calls this every `syncMs`. In a cluster a sync leaves out the names whose
   * call from an earlier sync is still in flight (see {@link RedisSync}) and then resolves false,
   * though it emits `'sync'` and counts in `stats.syncs` if every call it made succeeded. Once the
   * sync is closed, it syncs as {@link close} does, until every closed `SyncedLimiter` gave all its
   * keys back: a single sync gave back 1,024 and resolved true with thousands still out, which
   * lapsed at their lease with what they owed never charged.
   */
  flush(): Promise<boolean> {
    return this.closed ? this.#drain() : this.#once();
  }

  /** One sync, or the one under way. */
  #once(): Promise<boolean> {
    this.#running ??= this.#start();
    return this.#running;
  }

  /**
   * Syncs until no closed structure has more to give back (a closed `SyncedLimiter` gives its keys
   * back 1,024 a sync, so that no call holds Redis long), up to as many syncs as it needed before
   * the first and one spare: true once all went, false at the first sync that fails.
   */
  async #drain(): Promise<boolean> {
    for (let spare = this.#groups.pending() + 1; ; spare--) {
      if (!(await this.#once())) return false;
      if (this.#groups.pending() === 0) return true;
      if (spare === 1) return false;
    }
  }

  /**
   * The timer's sync. In a cluster, a sync still waiting on a name's call (a hung master's, until
   * `timeoutMs`) does not hold back the names whose calls are done: a new sync carries them.
   */
  #tick(): void {
    if (this.#running !== undefined && this.cluster && this.#groups.idle()) this.#running = this.#start();
    else void this.flush();
  }

  #start(): Promise<boolean> {
    const sync: Promise<boolean> = this.#sync().finally(() => {
      if (this.#running === sync) this.#running = undefined;
    });
    // Before whoever awaits it: a waiter that syncs again at once must not find it running.
    void sync.then((ok) => {
      this.#failing = !ok;
      this.#wake(ok);
    });
    return sync;
  }

  /** Settles {@link #ended} with `ok`, waking the waiting {@link ready} calls. */
  #wake(ok: boolean): void {
    const ended = this.#ended;
    this.#ended = settleable();
    ended.settle(ok);
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
   * It syncs at once (or joins the sync under way) unless the last sync failed, and again at once
   * after a first sync whose windows were placed before Redis's clock was known; otherwise it waits
   * for the timer's syncs, adding none of its own however many calls wait: a failed sync is tried
   * again every `syncMs`, so it waits as long as Redis cannot be reached (keeping the process alive
   * meanwhile); rejects with `ERR_KEEPCOUNT_CLOSED` if the sync is closed first, and with
   * `ERR_KEEPCOUNT_NODE_ID` if Redis refuses this node's id for good (another process synced a
   * `SyncedEstimator` under it, whose record never expires); a refusal that the other process's
   * lease or windows end, it waits out.
   */
  async ready(): Promise<void> {
    if (this.#closing !== undefined) throw notReadyError();
    // The caller is waiting on the timer's syncs: it must not let the process exit meanwhile.
    if (this.#waiters++ === 0) this.#timer.ref();
    try {
      await this.#untilReady();
    } finally {
      if (--this.#waiters === 0) this.#timer.unref();
    }
  }

  async #untilReady(): Promise<void> {
    let clockKnown = this.serverTimeKnown;
    let next = this.#failing ? this.#ended.settled : this.flush();
    for (;;) {
      // `synced`: a sync that reached Redis (with no structure yet, a flush sends nothing).
      const flushed = (await next) && this.synced;
      const refused = this.#groups.refusal;
      if (!flushed && refused !== undefined) throw refused;
      if (flushed && this.#groups.ready()) return;
      if (this.#closing !== undefined) throw notReadyError();
      // Windows placed before Redis's clock was known do not count for catching up (see #sync):
      // the next sync, at once, places them on it.
      next = flushed && !clockKnown ? this.flush() : this.#ended.settled;
      clockKnown = this.serverTimeKnown;
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
   * twice `timeoutMs` in all. A closed `SyncedLimiter` gives its keys back 1,024 a sync, so while
   * one still holds more, the last sync is followed at once by as many more as it needs, each up to
   * `timeoutMs` (with the 65,536 keys a node keeps at most, 64 syncs); it resolves true only once
   * every key went back, false at the first sync that fails, the keys not yet given back going at
   * a later `flush()`, which syncs as this does. In a cluster that includes a name's call still in
   * flight from an earlier sync (a hung master's): the last sync carries every structure.
   */
  close(): Promise<boolean> {
    this.#closed.abort();
    this.#closing ??= this.#close();
    // The waiting ready() calls reject now, not at the next sync's end.
    this.#wake(false);
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

  /**
   * True once {@link close} was called: the synced sketches and rates on it count no more (see
   * {@link close}).
   */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  async #close(): Promise<boolean> {
    clearInterval(this.#timer);
    // A sync's deadline is unreferenced so that syncing alone never keeps the process alive; the
    // last one is awaited by whoever closes, so a hung sender must not let the process exit first.
    this.#groups.refDeadlines();
    while (this.#running !== undefined || this.#groups.calls.length > 0) {
      await this.#running;
      await Promise.all(this.#groups.calls);
    }
    // The last sync, then one more for each that a closed structure still needs; what a failed
    // one leaves goes at a later flush().
    return this.#drain();
  }

  /**
   * One sync: a script call per group ({@link Group}: one for all, or one per name in a cluster)
   * but those with a call in flight, which it leaves out. Succeeds when every call it made did and
   * it left none out; each call's bookkeeping is its own ({@link SyncGroups.call}).
   */
  async #sync(): Promise<boolean> {
    let groups: Group[];
    let skipped: boolean;
    try {
      ({ groups, skipped } = this.#groups.take());
    } catch (error) {
      this.#stats.failures++;
      this.#report(error);
      return false;
    }
    const now = performance.now();
    const sent = this.#groups.toSend(groups, now);
    if (sent.length === 0) {
      if (!skipped) this.#groups.synced(now);
      return !skipped;
    }
    const seq = String(++this.#seq);
    const started = performance.now();
    const results = await Promise.all(sent.map((group) => this.#groups.call(group, seq, started)));
    if (!results.every(Boolean)) {
      this.#stats.failures++;
      return false;
    }
    const done = performance.now();
    if (!skipped) this.#groups.synced(done);
    this.#stats.syncs++;
    this.#stats.lastRoundTripMs = done - started;
    const entries = sent.flatMap((group) => group.entries);
    this.#stats.backlog = entries.reduce((sum, entry) => sum + entry.waiting, 0);
    this.#stats.behind = entries.filter((entry) => entry.behind).length;
    this.#notify('sync');
    return !skipped;
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

/** The `ERR_KEEPCOUNT_CLOSED` error of a {@link RedisSync.ready} on a closed sync. */
function notReadyError(): Error {
  return withCode(new Error('This RedisSync was closed before it was ready'), 'ERR_KEEPCOUNT_CLOSED');
}

/** A promise of a sync's result and the function that settles it. */
function settleable(): { settled: Promise<boolean>; settle: (ok: boolean) => void } {
  let settle!: (ok: boolean) => void;
  const settled = new Promise<boolean>((resolve) => (settle = resolve));
  return { settled, settle };
}
