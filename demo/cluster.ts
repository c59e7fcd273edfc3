/**
 * The protected proxy as N `node:cluster` workers, counting together:
 * - `--cluster N`: on one port, their rate limit and upstream in-flight cap in counters every
 *   process of the host shares (`openShared`), so the limits hold for the workers together
 *   instead of N times over;
 * - `--redis`: each on a port of its own, as machines behind a load balancer, their rate limit
 *   one quota synced through Redis (see redis.ts); the in-flight cap stays per process.
 */
import cluster from 'node:cluster';
import type { AddressInfo } from 'node:net';
import { syncedCounters } from './redis.js';
import { openShared, proxy, unlinkShared, type Counters } from './servers.js';

/** What the primary tells each worker (its environment). */
const UPSTREAM_PORT = 'KEEPCOUNT_DEMO_UPSTREAM_PORT';
const PREFIX = 'KEEPCOUNT_DEMO_SHARED';
const REDIS_PORT = 'KEEPCOUNT_DEMO_REDIS_PORT';

/** How the workers count together: host-shared memory, or Redis on a port. */
export type Sharing = { kind: 'shared' } | { kind: 'redis'; port: number };

/** The running workers: their ports (one, shared, for `'shared'`), the in-flight count, and how to stop them. */
export interface Workers {
  ports: number[];
  /** Calls in flight to the upstream, over every worker. */
  inflight(): Promise<number>;
  stop(): Promise<void>;
}

/** Forks `count` proxy workers in front of `upstreamPort`; resolves once every one listens. */
export async function startWorkers(count: number, upstreamPort: number, sharing: Sharing): Promise<Workers> {
  const prefix = `keepcount-demo-${process.pid}`;
  const env: Record<string, string> = { [UPSTREAM_PORT]: String(upstreamPort) };
  let shared: ReturnType<typeof openShared> | undefined;
  if (sharing.kind === 'shared') {
    shared = openShared(prefix);
    env[PREFIX] = prefix;
    // Named by this process: removed when it exits, also by Ctrl-C (the mappings stay valid).
    removeOnExit(prefix);
  } else {
    env[REDIS_PORT] = String(sharing.port);
  }
  const ports = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<number>((resolve, reject) => {
          const worker = cluster.fork(env);
          worker.once('message', (port: number) => resolve(port));
          worker.once('error', reject);
          worker.once('exit', (code) => reject(new Error(`demo worker exited with ${code}`)));
        }),
    ),
  );
  // Workers listening on port 0 share the primary's one handle, so they report one port; with
  // `exclusive` (Redis) each binds its own.
  const distinct = new Set(ports).size;
  if (distinct !== (sharing.kind === 'shared' ? 1 : count)) {
    throw new Error(`demo workers listen on unexpected ports: ${ports.join(', ')}`);
  }
  const workers = (): NonNullable<typeof cluster.workers>[string][] => Object.values(cluster.workers ?? {});
  return {
    ports: [...new Set(ports)],
    async inflight() {
      if (shared !== undefined) return shared.inflight.get('origin');
      const counts = await Promise.all(
        workers().map(
          (worker) =>
            new Promise<number>((resolve) => {
              worker!.once('message', (count: number) => resolve(count));
              worker!.send('inflight');
            }),
        ),
      );
      return counts.reduce((a, b) => a + b, 0);
    },
    async stop() {
      await Promise.all(
        workers().map(
          (worker) =>
            new Promise<void>((resolve) => {
              worker!.once('exit', () => resolve());
              worker!.disconnect();
            }),
        ),
      );
      if (sharing.kind === 'shared') unlinkShared(prefix);
    },
  };
}

/** Unlinks the segments of `prefix` when this process exits or is interrupted. */
function removeOnExit(prefix: string): void {
  process.once('exit', () => unlinkShared(prefix));
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      unlinkShared(prefix);
      process.kill(process.pid, signal);
    });
  }
}

/**
 * A worker's life: the proxy on the shared or synced counters, listening until the primary
 * disconnects it; it answers an `'inflight'` message with its own in-flight count.
 */
export function runWorker(): void {
  const redisPort = process.env[REDIS_PORT];
  const synced = redisPort === undefined ? undefined : syncedCounters(Number(redisPort));
  const counters: Counters = synced?.counters ?? openShared(process.env[PREFIX]!);
  const { server, inflight } = proxy(Number(process.env[UPSTREAM_PORT]), counters);
  process.on('message', (message) => {
    if (message === 'inflight') process.send!(inflight.inflight.get('origin'));
  });
  // Servers that listen `exclusive` are the worker's own, and the Redis client's socket is too:
  // neither is closed by cluster's disconnect, and either would keep the worker alive.
  process.once('disconnect', () => {
    server.close();
    server.closeAllConnections();
    void synced?.close();
  });
  server.listen({ port: 0, host: '127.0.0.1', exclusive: synced !== undefined }, () =>
    process.send!((server.address() as AddressInfo).port),
  );
}
