/**
 * The sync script's reply as a node reads it (the flat layout is documented in script.ts), and the
 * errors about Redis keys it reports on `'error'`.
 */
import { withCode } from '../errors.js';
import type { Pull, SyncedEntry } from './cells.js';
import { callError } from './sync-errors.js';

/** One script call's reply. */
export interface SyncReply {
  /** Per cell entry, what it pulled. */
  pulls: Pull[];
  /** Per loan, the tokens lent, or −1 when Redis did not apply it (a stale sequence number). */
  lent: number[];
  /** Per loan, the tokens left in its bucket after lending them (0 when not applied). */
  left: number[];
  /**
   * Per loan, the sequence number Redis holds for this process in the bucket when it is ahead of
   * the sync (the loan not applied: script.ts `SEQ_SPAN`), else 0.
   */
  ahead: number[];
  /** Keys of another Redis type the script deleted. */
  foreign: { key: string; type: string }[];
  /** Entries and buckets of corrupt values the script deleted, and what failed. */
  corrupt: { key: string; reason: string }[];
  /** Redis's time during the call, epoch milliseconds. */
  serverMs: number;
}

/**
 * Splits the script's flat reply (its layout is in script.ts) into a {@link SyncReply}; anything
 * else is a failed sync.
 */
export function parseReply(reply: unknown, entries: number, loans: number): SyncReply {
  const unexpected = (): Error =>
    callError(withCode(new Error('Unexpected reply from the keepcount sync script'), 'ERR_KEEPCOUNT_SYNC'));
  if (!Array.isArray(reply)) throw unexpected();
  const number = (index: number): number => {
    const value = Number(reply[index]);
    if (index >= reply.length || !Number.isFinite(value)) throw unexpected();
    return value;
  };
  const pulls: Pull[] = [];
  let a = 0;
  for (let k = 0; k < entries; k++) {
    const status = number(a);
    const applied = status === 1;
    const idTaken = status === 2;
    // Status 3 tells this process's own record ahead of the sync, its number in place of a version.
    const ahead = status === 3 ? number(a + 1) : 0;
    const version = number(a + 1);
    const head = number(a + 2);
    const incarnation = String(reply[a + 3]);
    const nodes = number(a + 4);
    const m = number(a + 5);
    a += 6;
    const cells: number[] = [];
    const others: number[] = [];
    for (let j = 0; j < m; j++, a += 2) {
      cells.push(number(a));
      others.push(number(a + 1));
    }
    // The catch-up scan's cells mean what the pull's do: taken in the same way (cells.ts).
    if (a >= reply.length) throw unexpected();
    const cursor = String(reply[a++]);
    const s = number(a++);
    for (let j = 0; j < s; j++, a += 2) {
      cells.push(number(a));
      others.push(number(a + 1));
    }
    const layouts: string[] = [];
    const o = number(a++);
    for (let j = 0; j < o; j++, a++) {
      if (a >= reply.length) throw unexpected();
      layouts.push(String(reply[a]));
    }
    pulls.push({ applied, idTaken, ahead, version, head, incarnation, nodes, cells, others, cursor, layouts });
  }
  const lent: number[] = [];
  const left: number[] = [];
  const ahead: number[] = [];
  for (let k = 0; k < loans; k++, a += 2) {
    lent.push(number(a));
    ahead.push(lent[k] === -3 ? number(a + 1) : 0);
    left.push(Math.max(0, number(a + 1)));
  }
  const foreign: { key: string; type: string }[] = [];
  const f = number(a++);
  for (let j = 0; j < f; j++, a += 2) {
    if (a + 1 >= reply.length) throw unexpected();
    foreign.push({ key: String(reply[a]), type: String(reply[a + 1]) });
  }
  const corrupt: { key: string; reason: string }[] = [];
  const c = number(a++);
  for (let j = 0; j < c; j++, a += 2) {
    if (a + 1 >= reply.length) throw unexpected();
    corrupt.push({ key: String(reply[a]), reason: String(reply[a + 1]) });
  }
  const serverMs = number(a++);
  if (a !== reply.length) throw unexpected();
  return { pulls, lent, left, ahead, foreign, corrupt, serverMs };
}

/**
 * Nodes of another layout (`theirs`) synced the same part of a structure within `liveMs`: they
 * were made with another seed, shape or sketch format, so they count every key in other cells and
 * the two groups count apart (script.ts), each blind to the other's traffic.
 */
export function layoutError(entry: SyncedEntry, theirs: string, liveMs: number): Error {
  const { base, layout } = entry.keys;
  const error = withCode(
    new Error(
      `Redis entry "${base}" has nodes of another layout syncing beside it within ${liveMs} ms: "${theirs}" ` +
        `against this node's "${layout}" (sketch format, hashes x slots, seed digest; for a rate or quota, -w and ` +
        'its window in ms). They would count one key in different cells or windows, so each layout counts apart ' +
        "and neither sees the other's traffic. Give every node of the structure the same seed, hashes and slots " +
        '(and window) and the same keepcount version, or give it another name ' +
        '(expected for a while during a rolling reconfiguration)',
    ),
    'ERR_KEEPCOUNT_LAYOUT',
  );
  return Object.assign(error, { key: base, layout, theirs });
}

/**
 * A key under the prefix that held a Redis type keepcount never writes there: another writer shares
 * the prefix. The script deleted it; `key` names it for the operator who has to find that writer.
 */
export function foreignKeyError(key: string, type: string, prefix: string): Error {
  const error = withCode(
    new Error(
      `Redis key "${key}" held a ${type}, which keepcount never writes there: something else writes under the ` +
        `"${prefix}" prefix. keepcount deleted the key and rebuilt what it held`,
    ),
    'ERR_KEEPCOUNT_FOREIGN_KEY',
  );
  return Object.assign(error, { key });
}

/**
 * An entry (or a bucket) whose keys held values keepcount never writes, of the right Redis type: the
 * script deleted them and handled them as lost (script.ts); `key` names the entry or the bucket. Or
 * a node or layout registry, or a leased entry's lease set, that held members keepcount never
 * scores so far ahead: the script removed those members (of a lease set, forgot their nodes);
 * `key` names the registry or the set. Or a bucket that held a node's fields or its tokens past
 * what keepcount writes (script.ts `BUCKET_SPAN`): the script removed those fields; `key` names
 * the bucket.
 */
export function corruptKeyError(key: string, reason: string, prefix: string): Error {
  const error = withCode(
    new Error(
      `Redis key "${key}" (or a key of its entry) held a value keepcount never writes (${reason}): something ` +
        `else writes under the "${prefix}" prefix. keepcount deleted the entry's keys (of a registry, the ` +
        'members named; of a bucket, the fields named) and rebuilt what they held',
    ),
    'ERR_KEEPCOUNT_CORRUPT',
  );
  return Object.assign(error, { key });
}

/**
 * A key (an entry's base, or a bucket) where Redis held this process's own sequence number `held`,
 * ahead of the sync `sent` the node was waiting on: none it sent, since it sends a key's syncs one
 * at a time, numbered up, and reads the reply only of the one it waits on (script.ts `SEQ_SPAN`).
 * That sync applied nothing there; the node numbers its next syncs past it.
 */
export function aheadKeyError(key: string, nodeId: string, held: number, sent: string, prefix: string): Error {
  const error = withCode(
    new Error(
      `Redis key "${key}" (or a key of its entry) held a value keepcount never writes (s:${nodeId} ${held}, ` +
        `ahead of the sync ${sent} this process was waiting on): something else writes under the "${prefix}" ` +
        "prefix. That sync applied nothing there, and keepcount numbers this node's next syncs past it",
    ),
    'ERR_KEEPCOUNT_CORRUPT',
  );
  return Object.assign(error, { key });
}

/**
 * A sync that Redis did not apply because it holds this node's id for another process: another
 * live process syncs under the same `nodeId`, or this one took the id of a process that synced
 * before it (a restart), whose record stands until Redis forgets it. Either way this node's counts
 * would not reach the fleet.
 */
export function nodeIdTakenError(nodeId: string): Error {
  const error = withCode(
    new Error(
      `Redis holds node id "${nodeId}" for another process: another process syncs under the ` +
        'same nodeId, or this one reuses the id of one that synced before it. Its counts are not applied ' +
        '(the sync fails); give every process a nodeId of its own and never reuse one (the default, a ' +
        'random UUID, is)',
    ),
    'ERR_KEEPCOUNT_NODE_ID',
  );
  return callError(error);
}
