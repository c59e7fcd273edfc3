/**
 * What the hostile-input specs of keepcount/redis share (redis-hostile.spec.ts for entries and
 * registries, redis-hostile-leases.spec.ts for leases, buckets and sequence numbers): syncs
 * flushed by hand, the errors they report, and pairs of nodes.
 */
import type { ExecutionContext } from 'ava';
import { RedisSync, SyncedEstimator, SyncedInflight } from '../lib/redis/index.js';
import type { Connection } from './redis-clients.js';

/** A sync whose timer never fires within a test: the spec flushes by hand, in an order it chooses. */
export const BY_HAND = 60_000;

/** Errors a sync emitted, kept in order. */
export function errorsOf(sync: RedisSync): Error[] {
  const errors: Error[] = [];
  sync.on('error', (error: Error) => errors.push(error));
  return errors;
}

/** Sets `node`'s sequence number in hash `key` `by` past the one there, its process token kept. */
export async function ahead(connection: Connection, key: string, node: string, by: number): Promise<void> {
  const seq = Number(await connection.send(['HGET', key, `s:${node}`]));
  await connection.send(['HSET', key, `s:${node}`, String(seq + by)]);
}

/** The ERR_KEEPCOUNT_CORRUPT errors among `errors`. */
export const corruptOf = (errors: Error[]): (Error & { key?: string })[] =>
  errors.filter((e) => (e as { code?: string }).code === 'ERR_KEEPCOUNT_CORRUPT');

/** Two nodes syncing one `SyncedEstimator` by hand on `connection`, each with the errors it reported. */
export function estimatorNodes(connection: Connection, name: string) {
  const node = () => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
    return { sync, errors: errorsOf(sync), sketch: new SyncedEstimator({ sync, name, seed: 3 }) };
  };
  const nodes = [node(), node()] as const;
  /** Flushes both nodes `times` times, each flush succeeding. */
  const flush = async (t: ExecutionContext, times: number) => {
    for (let i = 0; i < times; i++)
      t.deepEqual([await nodes[0].sync.flush(), await nodes[1].sync.flush()], [true, true]);
  };
  return { nodes, flush };
}

/** Two nodes syncing one `SyncedInflight` by hand on `connection`, each under `nodeId` if given. */
export function inflightNodes(connection: Connection, name: string, nodeId?: string) {
  const node = () => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, nodeId });
    return { sync, errors: errorsOf(sync), slots: new SyncedInflight({ sync, name, seed: 3 }) };
  };
  return [node(), node()] as const;
}
