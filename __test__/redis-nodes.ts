/**
 * Nodes for the keepcount/redis specs: count-mode node processes run against a real redis-server,
 * waiting until they have synced, and the fleet-wide totals as a fresh node reads them.
 */
import { RedisSync, SyncedEstimator, SyncedWindowQuota } from '../lib/redis/index.js';
import { EXACT_QUOTA } from './redis-exact-quota.js';
import { runFixture } from './helpers.js';
import { connectClient, type ClientName } from './redis-clients.js';
import type { RedisServer } from '../tools/redis-server.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `nodes` count-mode node processes together; resolves with their parsed results. */
export async function countNodes(
  server: RedisServer,
  client: ClientName,
  name: string,
  nodes: number,
  increments: number,
  spreadMs: number,
): Promise<{ thrown: number; errors: number; synced: boolean }[]> {
  const job = { mode: 'count', client, port: server.port, name, seed: 7, syncMs: 50, increments, spreadMs };
  const runs = await Promise.all(
    Array.from({ length: nodes }, () => runFixture('redis-node.ts', { args: [JSON.stringify(job)] })),
  );
  return runs.map((run) => {
    if (run.code !== 0) throw new Error(`node exited with ${run.code}: ${run.stderr}`);
    return JSON.parse(run.stdout) as { thrown: number; errors: number; synced: boolean };
  });
}

/** Resolves once `nodes` nodes have synced `name` (so they are running), polling its node registry. */
export async function waitForNodes(server: RedisServer, name: string, nodes: number): Promise<void> {
  const connection = await connectClient('ioredis', server.port);
  try {
    const deadline = performance.now() + 20_000;
    while (Number(await connection.send(['ZCARD', `keepcount:{${name}}:e:nodes`])) < nodes) {
      if (performance.now() > deadline) throw new Error(`${nodes} nodes never synced ${name}`);
      await sleep(20);
    }
  } finally {
    await connection.close();
  }
}

/**
 * The fleet-wide counts of `k0`..`k9` as a fresh node reads them after one sync: in the sketch,
 * and exact (count-mode nodes count every key exactly on a quota of the same name too).
 */
export async function readTotals(
  server: RedisServer,
  client: ClientName,
  name: string,
): Promise<{ sketch: number[]; exact: number[] }> {
  const connection = await connectClient(client, server.port);
  const sync = new RedisSync({ sendCommand: connection.send });
  const sketch = new SyncedEstimator({ sync, name, seed: 7 });
  const quota = new SyncedWindowQuota({ sync, name, seed: 7, ...EXACT_QUOTA });
  const ok = await sync.flush();
  await sync.close();
  await connection.close();
  if (!ok) throw new Error('could not sync');
  const keys = Array.from({ length: 10 }, (_, i) => `k${i}`);
  return { sketch: keys.map((k) => sketch.get(k)), exact: keys.map((k) => quota.current(k).count) };
}
