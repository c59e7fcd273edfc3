/**
 * A real Redis Cluster on loopback for the keepcount/redis cluster specs: `masters` servers from
 * {@link startRedis} with cluster mode on (each its own port, cluster bus port and temporary
 * directory), joined by `redis-cli --cluster create` with no replicas, and ready once every node
 * reports `cluster_state:ok`. Debian's `redis-server` depends on `redis-tools`, which holds
 * `redis-cli`; `.ci/run` installs both when either is missing.
 */
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { freePort, startRedis, type RedisServer } from './redis-server.js';

const run = promisify(execFile);

/** How long the cluster may take to agree on its slots once created. */
const READY_TIMEOUT_MS = 20_000;

/** A running test cluster. */
export interface RedisCluster {
  /** Its nodes, every one a master with a third of the slots (for three). */
  readonly nodes: readonly RedisServer[];
  /** `{ host, port }` of every node, the seed list cluster clients take. */
  readonly seeds: { host: string; port: number }[];
  /** Stops every node and removes their directories. */
  stop(): Promise<void>;
}

/** Throws a plain error saying what to install when `redis-cli` is not on the PATH. */
export function requireRedisCli(): void {
  const probe = spawnSync('redis-cli', ['--version'], { encoding: 'utf8' });
  if (probe.error !== undefined || probe.status !== 0) {
    throw new Error('redis-cli was not found on the PATH: install it (Debian/Ubuntu: apt-get install redis-tools)');
  }
}

/** `CLUSTER INFO`'s `cluster_state` on `port`, or `undefined` while the node does not answer. */
async function clusterState(port: number): Promise<string | undefined> {
  try {
    const { stdout } = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'CLUSTER', 'INFO']);
    return /cluster_state:(\w+)/.exec(stdout)?.[1];
  } catch {
    return undefined;
  }
}

/** Starts a cluster of `masters` (at least 3, as `redis-cli --cluster create` requires) nodes. */
export async function startRedisCluster(masters = 3): Promise<RedisCluster> {
  requireRedisCli();
  const nodes: RedisServer[] = [];
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((node) => node.stop()));
  };
  try {
    for (let i = 0; i < masters; i++) nodes.push(await startRedis({ clusterBusPort: await freePort() }));
    await run('redis-cli', [
      '--cluster',
      'create',
      ...nodes.map((node) => `127.0.0.1:${node.port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ]);
    const deadline = performance.now() + READY_TIMEOUT_MS;
    for (;;) {
      const states = await Promise.all(nodes.map((node) => clusterState(node.port)));
      if (states.every((state) => state === 'ok')) break;
      if (performance.now() > deadline) throw new Error(`Redis Cluster not ready: cluster_state ${states.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } catch (error) {
    await stop();
    throw error;
  }
  return { nodes, seeds: nodes.map((node) => ({ host: '127.0.0.1', port: node.port })), stop };
}
