/**
 * One script call of a sync: the keys and arguments that carry a group of entries and loans to the
 * sync script (script.ts), and what its reply does to them. A call that fails gives its entries
 * back the cells it took, to go with the next sync, and tells its loans.
 *
 * @module
 */
import { LIVE_PERIODS, type Push, type SyncedEntry } from './cells.js';
import type { LoanRequest } from './loan.js';
import { aheadKeyError, corruptKeyError, foreignKeyError, nodeIdTakenError, parseReply } from './reply.js';
import { runSyncScript } from './script.js';
import type { SendCommand } from './send.js';
import type { ServerClock } from './server-clock.js';
import type { SyncStats } from './sync-types.js';

/**
 * Most cells one entry pushes in one sync, and most it pulls (twice that, so that a pull cut short
 * still holds one whole push: see script.ts). The script does about six Redis operations per cell,
 * so this keeps one sync to a few milliseconds of the server's time; a node that changes more cells
 * per sync period pushes them over the next syncs, oldest first (nothing is lost, but a change
 * waits a sync per 2,048 ahead of it, which `staleness` does not count).
 */
const MAX_PUSH = 2048;
const MAX_PULL = 2 * MAX_PUSH;

/** The registry keeps a node this many sync periods after its last sync (cells.ts). */
export { LIVE_PERIODS };

/** Per layout registry of a call, an entry it came with and the other layouts it named. */
export type Layouts = Map<string, { entry: SyncedEntry; others: Set<string> }>;

/**
 * What a successful call brought back: the live node count, an error for each key of another type,
 * or entry of corrupt values, the script deleted, and the layouts its registries named.
 */
export interface CallResult {
  nodes: number;
  keyErrors: Error[];
  layouts: Layouts;
}

/** What every call of a sync sends alike, and where it counts what it did. */
export interface CallContext {
  nodeId: string;
  syncMs: number;
  prefix: string;
  /**
   * Tells this process's syncs from another's under the same `nodeId` (a restart given a fixed
   * id): Redis keeps a node's record for the process that wrote it, whatever the sequence numbers.
   */
  process: string;
  /** The sync's sender, which counts commands. */
  send: SendCommand;
  /** Redis's clock, which each reply tells. */
  serverClock: ServerClock;
  /** The sync's counters: a call adds the cells it pushed and pulled. */
  stats: SyncStats;
  /**
   * Numbers the sync's next calls past `seq`: Redis held this process's own sequence number `seq`,
   * ahead of a call the node was waiting on, which no number it sent can be (script.ts `SEQ_SPAN`).
   */
  numberPast: (seq: number) => void;
}

/** The node-id refusals that no lease or expiry ends: see {@link refusedForGood}. */
const forGood = new WeakSet<object>();

/**
 * Whether a call failed with `error` because Redis refused this node's id for good (on an entry
 * whose record has no lease and never expires: a `SyncedEstimator`'s); a refusal that a lease or a
 * window ends is not.
 */
export function refusedForGood(error: unknown): boolean {
  return forGood.has(error as object);
}

/**
 * One script call for `entries` and `loans` (keys of one hash slot in a cluster): pushes their
 * changed cells, takes in their pulls and the tokens lent. A failure, or `timeout` rejecting first,
 * marks the cells it would have pushed to go with the next sync, tells the loans, and rejects.
 */
export async function syncCall(
  context: CallContext,
  entries: SyncedEntry[],
  loans: LoanRequest[],
  seq: string,
  timeout: Promise<never>,
  started: number,
): Promise<CallResult> {
  const { nodeId, stats } = context;
  const pushes = entries.map((entry) => entry.take(MAX_PUSH));
  try {
    const keys: string[] = [];
    const args = [
      nodeId,
      String(context.syncMs * LIVE_PERIODS),
      String(MAX_PULL),
      String(entries.length),
      context.process,
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
    const reply = await Promise.race([runSyncScript(context.send, keys, args), timeout]);
    const { pulls, lent, left, ahead, foreign, corrupt, serverMs } = parseReply(reply, entries.length, loans.length);
    context.serverClock.heard(serverMs, sentAt, performance.now());
    // Not one entry of this sync was applied, nor will any later one be while the other
    // process runs: a failed sync (stale, then the fail policies), not a silent loss.
    if (pulls.some((pull) => pull.idTaken) || lent.some((tokens) => tokens === -2)) {
      const error = nodeIdTakenError(nodeId);
      if (pulls.some((pull, k) => pull.idTaken && entries[k]!.leaseMs === 0 && entries[k]!.ttlMs() === 0)) {
        forGood.add(error);
      }
      throw error;
    }
    // This process's own record ahead of this call, which the node was waiting on: none it wrote
    // (a late call meets one, but its reply is never read). Nothing applied there; the next call,
    // numbered past it, applies, and the key is reported this once.
    const overtaken: Error[] = [];
    const past = (key: string, held: number) => {
      overtaken.push(aheadKeyError(key, nodeId, held, seq, context.prefix));
      context.numberPast(held);
    };
    let nodes = 1;
    const layouts: Layouts = new Map();
    pulls.forEach((pull, k) => {
      const entry = entries[k] as SyncedEntry;
      const push = pushes[k] as Push;
      if (pull.ahead > 0) {
        entry.restore(push);
        past(entry.keys.base, pull.ahead);
      } else {
        entry.apply(pull, Number(seq), sentAt);
        // Not applied, not refused: Redis held this very number already, as after a retried call
        // that had applied, or a hostile write of the node's next number, which applied nothing
        // and before lost the push for good. Pushes are cumulative, so pushing it again next time
        // counts nothing twice.
        if (!pull.applied) entry.restore(push);
        stats.cellsPulled += pull.cells.length;
        stats.cellsPushed += push.cells.length;
      }
      // The registries answer an overtaken call too: left out, the sync's node count read 1 and its
      // layouts none, so a layout mismatch was reported again at the next sync.
      nodes = Math.max(nodes, pull.nodes);
      layouts.set(entry.keys.layouts, { entry, others: new Set(pull.layouts) });
    });
    loans.forEach((loan, k) => {
      const held = ahead[k] as number;
      if (held > 0) {
        loan.overtaken(held);
        past(loan.key, held);
      } else loan.lent(lent[k] as number, left[k] as number, started, Number(seq));
    });
    const keyErrors = [
      ...foreign.map(({ key, type }) => foreignKeyError(key, type, context.prefix)),
      ...corrupt.map(({ key, reason }) => corruptKeyError(key, reason, context.prefix)),
      ...overtaken,
    ];
    return { nodes, keyErrors, layouts };
  } catch (error) {
    pushes.forEach((push, k) => (entries[k] as SyncedEntry).restore(push));
    for (const loan of loans) loan.failed();
    throw error;
  }
}
