/** The two Redis clients the keepcount/redis specs run against, behind one `sendCommand`. */
import { Cluster, Redis } from 'ioredis';
import { createClient, createCluster } from 'redis';
import { ioredisSender, nodeRedisClusterSender, nodeRedisSender, type SendCommand } from '../lib/redis/index.js';

export type ClientName = 'ioredis' | 'redis';

export const clientNames: readonly ClientName[] = ['ioredis', 'redis'];

/** A connected client of `name` on 127.0.0.1:`port`, its sender, and how to let it go. */
export interface Connection {
  send: SendCommand;
  close(): Promise<void>;
}

/**
 * Connects with the library's defaults for reconnecting, as an application would: both queue
 * commands while disconnected and reconnect on their own. A client's 'error' events (a server
 * that went away) are swallowed: keepcount reports sync failures on its own `'error'` event.
 */
export async function connectClient(name: ClientName, port: number): Promise<Connection> {
  if (name === 'ioredis') {
    const client = new Redis({ port, host: '127.0.0.1', maxRetriesPerRequest: null });
    client.on('error', () => undefined);
    return { send: ioredisSender(client), close: async () => client.disconnect() };
  }
  const client = createClient({ url: `redis://127.0.0.1:${port}` });
  client.on('error', () => undefined);
  await client.connect();
  return { send: nodeRedisSender(client), close: async () => void client.destroy() };
}

/**
 * A connected cluster client of `name`, given the cluster's nodes as seeds: an ioredis `Cluster`
 * or a node-redis `createCluster`, each finding the slots' owners on its own.
 */
export async function connectCluster(name: ClientName, seeds: { host: string; port: number }[]): Promise<Connection> {
  if (name === 'ioredis') {
    const cluster = new Cluster(seeds, { redisOptions: { maxRetriesPerRequest: null } });
    cluster.on('error', () => undefined);
    return { send: ioredisSender(cluster), close: async () => cluster.disconnect() };
  }
  const cluster = createCluster({ rootNodes: seeds.map(({ host, port }) => ({ url: `redis://${host}:${port}` })) });
  cluster.on('error', () => undefined);
  await cluster.connect();
  return { send: nodeRedisClusterSender(cluster), close: async () => cluster.destroy() };
}
