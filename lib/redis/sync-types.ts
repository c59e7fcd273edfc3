/**
 * The types at the seam between keepcount/redis' structures, the user and {@link RedisSync}: the
 * sync's options and statistics, and what a structure hands the sync.
 *
 * @module
 */
import type { SyncedEntry } from './cells.js';
import type { LoanRequest } from './loan.js';
import type { SendCommand } from './send.js';

/** Options of {@link RedisSync}. */
export interface RedisSyncOptions {
  /** Sends a command to Redis, e.g. `ioredisSender(client)` or `nodeRedisSender(client)`. Required. */
  sendCommand: SendCommand;
  /** Milliseconds between syncs: an integer in [1, 3,600,000]. Defaults to 100. */
  syncMs?: number;
  /**
   * How long one sync may take before it counts as failed and its cells are marked to push again
   * (a server stopped with SIGSTOP never answers): an integer in [1, 3,600,000]. Defaults to 1,000.
   */
  timeoutMs?: number;
  /**
   * How old the last successful sync may be before structures apply their fail policy: an integer
   * in [1, 3,600,000]. Defaults to `timeoutMs + syncMs` (at most 3,600,000). With `cluster`, each
   * structure goes by the last successful call carrying it (its name's), not the sync's.
   */
  staleAfterMs?: number;
  /** Prefix of every key. Defaults to `'keepcount'`. */
  prefix?: string;
  /**
   * This node's id in Redis: unique per process, since the server keeps each node's contribution
   * (its cumulative counts) and last sequence number under it. Never reuse one after a restart:
   * the new process would overwrite the old one's counts with its own and its sequence numbers
   * would be refused as stale. A sync that finds a later sequence number of its id in Redis,
   * another process's, fails with `ERR_KEEPCOUNT_NODE_ID` (reported on `'error'`) until the other process's keys expire.
   * Defaults to a random UUID.
   */
  nodeId?: string;
  /**
   * Whether Redis is a Redis Cluster. A script may only touch keys of one hash slot, and each
   * structure's keys share one hash tag (its name), so in a cluster a sync sends one script call
   * per structure name, all at once, instead of one for everything: as many round trips, in
   * parallel, as there are names. A name whose call is still in flight (a hung master's, until
   * `timeoutMs`) is left out of the next syncs, the others going on every `syncMs`. Left false
   * against a cluster, a sync carrying two names fails with Redis' CROSSSLOT error. Defaults to
   * false.
   */
  cluster?: boolean;
}

/** What a structure gives the sync: its entries to push and pull now, and its loans to ask for. */
export interface SyncSource {
  entries(): SyncedEntry[];
  loans?(): LoanRequest[];
  /** Whether the structure is ready to serve ({@link RedisSync.ready}); ready if absent. */
  ready?(): boolean;
  /**
   * Whether the entries it just gave sit where the fleet's do: false for a rate's windows placed
   * on this process's clock before the sync knew Redis's. A sync carrying such entries says
   * nothing of catching up ({@link RedisSync.ready}). Placed if absent.
   */
  placed?(): boolean;
  /**
   * The syncs a closed structure still needs to send what it owes Redis (a closed `SyncedLimiter`
   * gives its keys back 1,024 a sync): {@link RedisSync.close} syncs until none has any. 0 if
   * absent.
   */
  pending?(): number;
}

/** Counts of what this node has sent, for metrics. */
export interface SyncStats {
  /**
   * Successful syncs: every call made succeeded (in a cluster, a sync leaves out names whose earlier
   * call is still in flight, and counts here if the calls it did make succeeded).
   */
  syncs: number;
  /** Failed or timed-out syncs. */
  failures: number;
  /** Redis commands sent (a NOSCRIPT retry counts twice). */
  commands: number;
  /** Cells pushed, over all syncs. */
  cellsPushed: number;
  /** Cells pulled, over all syncs: those of the catch-up scans of a joining node too (cells.ts). */
  cellsPulled: number;
  /** Duration of the last successful sync (the round trip and the script), in ms. */
  lastRoundTripMs: number;
  /**
   * Counters changed and still waiting for a push after the last successful sync: a push carries
   * at most 2,048 per structure, and a backlog delays the changes behind it a sync per 2,048
   * without counting as staleness (see README, "A sync pushes at most 2,048").
   */
  backlog: number;
  /**
   * Entries (a sketch, a window of a rate or quota, a window's exact counts) whose pull at the last
   * successful sync was cut short: a pull carries at most 4,096 changed cells, so more of the
   * others' changes wait in Redis and reach this node a sync per 4,096 later. A node that joined a
   * busy fleet is behind for its first syncs ({@link RedisSync.ready} waits only until it holds what
   * the others had counted when it joined, which it also scans for: see cells.ts); a flood that
   * changes more cells of an entry per sync keeps every node behind while it lasts. Like
   * {@link backlog}, not staleness (see README, "A sync pushes at most 2,048").
   */
  behind: number;
}
