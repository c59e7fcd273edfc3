/**
 * The structures on a {@link RedisSync} and the bookkeeping of its calls. A sync sends one script
 * call per group: every structure, or in a cluster the structures of one name (one hash tag, so
 * one slot on one master). A group has one call in flight at a time (its entries' cells taken
 * once, their sequence numbers in order), and a sync leaves out the groups whose call is still in
 * flight, so a hung master holds back only its own names. What a call that ended leaves is
 * settled here, group by group: how fresh each structure it carried is, whether it has caught up,
 * the nodes and layouts its registries named, a refusal of this node's id; and a retired structure
 * with nothing left to push stops syncing.
 *
 * @module
 */
import type { SyncedEntry } from './cells.js';
import type { LoanRequest } from './loan.js';
import { layoutError } from './reply.js';
import { LIVE_PERIODS, refusedForGood, syncCall, type CallContext, type CallResult } from './sync-call.js';
import { failedCallError, syncError, timeoutError } from './sync-errors.js';
import type { SyncSource } from './sync-types.js';

/**
 * The structures one script call carries: all of them, or, in a cluster, those of one name (one
 * hash tag). `key` is `''` for all, else the name.
 */
export interface Group {
  key: string;
  names: string[];
  carried: { source: SyncSource; entries: SyncedEntry[]; placed: boolean }[];
  entries: SyncedEntry[];
  loans: LoanRequest[];
}

/** Per layout registry, an entry it came with, the other layouts it named and its group's key. */
type Heard = Map<string, { entry: SyncedEntry; others: Set<string>; group: string }>;

/** What the groups' calls need of their sync. */
export interface GroupsConfig extends CallContext {
  cluster: boolean;
  timeoutMs: number;
  /** Aborted once the sync closes: from then on a call's deadline keeps the process alive. */
  closed: AbortSignal;
  /** Reports an error on the sync's `'error'`. */
  report: (error: unknown) => void;
}

/** The structures on one {@link RedisSync}, a group per call, and the bookkeeping of the calls. */
export class SyncGroups {
  readonly #config: GroupsConfig;
  readonly #sources = new Set<SyncSource>();
  /**
   * Closed structures still in {@link #sources} until what they counted is pushed: see
   * {@link retire}.
   */
  readonly #retiring = new Set<SyncSource>();
  /** The running calls' deadlines, referenced once the sync's `close()` waits on them. */
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
   * A sync leaves them out.
   */
  readonly #busy = new Map<string, Promise<boolean>>();
  /** Per group, the live nodes its last successful call counted. */
  readonly #nodesBy = new Map<string, number>();
  /**
   * The last sync that carried every structure and succeeded (or construction, before the first).
   */
  #lastSuccess = performance.now();
  /**
   * When a call last succeeded (in a cluster, of any name): where a new structure's freshness
   * starts.
   */
  #lastCall = this.#lastSuccess;
  /**
   * Per group, the refusal of its last failed call, if Redis refused it for this node's id for
   * good ({@link refusedForGood}): the sync's `ready()` rejects with it rather than wait for ever.
   */
  readonly #idRefused = new Map<string, Error>();
  /**
   * The other layouts each layout registry named at the last sync, so that a misconfiguration is
   * reported once, not every sync (and again if it goes away and comes back).
   */
  readonly #heard: Heard = new Map();
  /**
   * The structures that hold what the others had counted when this node joined: every entry the
   * first successful sync carrying them carried has caught up ({@link SyncedEntry.caughtUp}) or
   * ended (a window since rotated out). What the sync's `ready()` waits for. Only those entries: a
   * window that begins later is new to every node alike, and under a flood that outruns the pulls
   * its catch-up could take longer than the window lasts, window after window, and `ready()` would
   * wait as long as the flood (1 s windows at `syncMs` 1,000 with three flooding nodes).
   */
  readonly #caughtUp = new WeakSet<SyncSource>();
  /**
   * For each structure not yet {@link #caughtUp}: the entries of its first sync still catching up.
   */
  readonly #joining = new WeakMap<SyncSource, SyncedEntry[]>();

  constructor(config: GroupsConfig) {
    this.#config = config;
  }

  /** Syncs `source`, the structure named `name`, until it is {@link remove}d or {@link retire}d. */
  add(source: SyncSource, name: string): void {
    this.#sources.add(source);
    this.#names.set(source, name);
    // In a cluster, as fresh as the sync's latest successful call: the last sync that carried
    // every name may be long past while one master is down, and a structure made then on a
    // healthy master would start out stale (a 'closed' quota refusing until its first call).
    this.#fresh.set(source, this.#config.cluster ? Math.max(this.#lastSuccess, this.#lastCall) : this.#lastSuccess);
  }

  /** Stops syncing `source` now: what it has not pushed stays unpushed. */
  remove(source: SyncSource): void {
    this.#sources.delete(source);
    this.#fresh.delete(source);
    this.#names.delete(source);
  }

  /**
   * Stops syncing `source` once everything it counted has been pushed: after the first successful
   * call that leaves none of its cells waiting.
   */
  retire(source: SyncSource): void {
    if (this.#sources.has(source)) this.#retiring.add(source);
  }

  /**
   * When `source` last synced (with none, the stalest structure): in a cluster, the last successful
   * call carrying it; without `cluster`, or with no structure, the last sync that carried every
   * structure and succeeded (construction, before the first).
   */
  freshAt(source?: SyncSource): number {
    if (!this.#config.cluster || this.#sources.size === 0) return this.#lastSuccess;
    if (source !== undefined) return this.#fresh.get(source) ?? this.#lastSuccess;
    let oldest = Infinity;
    for (const s of this.#sources) oldest = Math.min(oldest, this.#fresh.get(s) ?? this.#lastSuccess);
    return oldest;
  }

  /** The most live nodes any group's last successful call counted, at least 1. */
  get nodes(): number {
    return Math.max(1, ...this.#nodesBy.values());
  }

  /** The most syncs any structure still needs to send what it owes ({@link SyncSource.pending}). */
  pending(): number {
    let most = 0;
    for (const source of this.#sources) most = Math.max(most, source.pending?.() ?? 0);
    return most;
  }

  /** Whether a structure's group has no call in flight. */
  idle(): boolean {
    for (const source of this.#sources) if (!this.#busy.has(this.#groupOf(source))) return true;
    return false;
  }

  /** The calls in flight. */
  get calls(): Promise<boolean>[] {
    return [...this.#busy.values()];
  }

  /** References the running calls' deadlines: the sync's `close()` awaits them. */
  refDeadlines(): void {
    for (const deadline of this.#deadlines) deadline.ref();
  }

  /** A refusal of this node's id for good, by the last call of some group ({@link #idRefused}). */
  get refusal(): Error | undefined {
    return this.#idRefused.values().next().value;
  }

  /** Whether every structure has caught up ({@link #caughtUp}) and is ready to serve. */
  ready(): boolean {
    return [...this.#sources].every((source) => this.#caughtUp.has(source) && (source.ready?.() ?? true));
  }

  /**
   * The groups of the next sync, their structures' entries and loans taken now, and whether it
   * leaves any out (their call from an earlier sync still in flight).
   */
  take(): { groups: Group[]; skipped: boolean } {
    let skipped = false;
    const byKey = new Map<string, SyncSource[]>();
    for (const source of [...this.#sources]) {
      const key = this.#groupOf(source);
      if (this.#busy.has(key)) skipped = true;
      else byKey.set(key, [...(byKey.get(key) ?? []), source]);
    }
    this.#forgetGone();
    const groups = [...byKey].map(([key, sources]) => {
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
    return { groups, skipped };
  }

  /**
   * The groups that need a call: those with something to push or ask for. The others are in sync
   * as they are: their structures are fresh at `now`.
   */
  toSend(groups: Group[], now: number): Group[] {
    for (const group of groups.filter((g) => g.entries.length === 0 && g.loans.length === 0)) {
      for (const { source } of group.carried) if (this.#fresh.has(source)) this.#fresh.set(source, now);
      this.#dropSettled(group.carried);
    }
    return groups.filter((g) => g.entries.length > 0 || g.loans.length > 0);
  }

  /** Notes a sync that carried every structure and succeeded at `at`. */
  synced(at: number): void {
    this.#lastSuccess = at;
  }

  /**
   * Sends `group`'s call, its group busy until it ends; resolves (never rejects) with whether it
   * succeeded, once its bookkeeping is done.
   */
  call(group: Group, seq: string, started: number): Promise<boolean> {
    const { timeoutMs, cluster, closed, report } = this.#config;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(timeoutError(timeoutMs, group.names, cluster)), timeoutMs);
      if (!closed.aborted) timer.unref();
      this.#deadlines.add(timer);
    });
    const end = () => {
      clearTimeout(timer);
      this.#deadlines.delete(timer as NodeJS.Timeout);
      this.#busy.delete(group.key);
    };
    const call = syncCall(this.#config, group.entries, group.loans, seq, timeout, started).then(
      (result) => {
        end();
        try {
          this.#settle(group, result);
          return true;
        } catch (error) {
          report(error);
          return false;
        }
      },
      (error: unknown) => {
        end();
        try {
          if (refusedForGood(error)) this.#idRefused.set(group.key, error as Error);
          else this.#idRefused.delete(group.key);
          report(syncError(error, group.names));
        } catch {
          // Reporting must not reject the sync: the timer's flush() is not awaited. A new error,
          // naming the call, with what the client rejected with as its cause.
          report(failedCallError(group.names, error, 'its rejection could not be described'));
        }
        return false;
      },
    );
    this.#busy.set(group.key, call);
    return call;
  }

  /** The key of `source`'s {@link Group}. */
  #groupOf(source: SyncSource): string {
    return this.#config.cluster ? (this.#names.get(source) ?? '') : '';
  }

  /**
   * Forgets the node counts and layouts heard for names no structure syncs any more (in a cluster).
   * With none left it keeps them, as the sync did before names ran apart: `nodes` is what a
   * structure added next divides its limit by until its first sync (a 'local' quota made while
   * Redis is away), and one name's count stands for the fleet's then.
   */
  #forgetGone(): void {
    if (!this.#config.cluster || this.#sources.size === 0) return;
    const keys = new Set([...this.#sources].map((source) => this.#groupOf(source)));
    for (const key of this.#nodesBy.keys()) if (!keys.has(key)) this.#nodesBy.delete(key);
    for (const [layouts, heard] of this.#heard) if (!keys.has(heard.group)) this.#heard.delete(layouts);
  }

  /** The bookkeeping of `group`'s call that succeeded. */
  #settle(group: Group, result: CallResult): void {
    const { report, syncMs } = this.#config;
    this.#idRefused.delete(group.key);
    this.#nodesBy.set(group.key, result.nodes);
    for (const error of result.keyErrors) report(error);
    // The group's registries named these layouts now; those it named before and no longer go.
    for (const [key, now] of result.layouts) {
      const before = this.#heard.get(key)?.others;
      for (const theirs of now.others) {
        if (before?.has(theirs) !== true) report(layoutError(now.entry, theirs, syncMs * LIVE_PERIODS));
      }
    }
    for (const [key, heard] of this.#heard) if (heard.group === group.key) this.#heard.delete(key);
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

  /**
   * Stops syncing the retired structures of `carried` with nothing left to push ({@link retire}).
   */
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
}
