/**
 * The protected proxy as N `node:cluster` workers, counting together:
 * - `--cluster N`: on one port, their rate limit and upstream in-flight cap in counters every
 *   process of the host shares (`openShared`), so the limits hold for the workers together
 *   instead of N times over;
 * - `--redis`: each on a port of its own, as machines behind a load balancer, their rate limit
 *   one quota synced through Redis (see redis.ts); the in-flight cap stays per process.
 */
import cluster, { type Worker } from 'node:cluster';
import type { AddressInfo } from 'node:net';
import { syncedCounters } from './redis.js';
import { openShared, proxy, unlinkShared, type Counters } from './servers.js';

/** What the primary tells each worker (its environment). */
const UPSTREAM_PORT = 'KEEPCOUNT_DEMO_UPSTREAM_PORT';
const PREFIX = 'KEEPCOUNT_DEMO_SHARED';
const REDIS_PORT = 'KEEPCOUNT_DEMO_REDIS_PORT';
const PROCESSES = 'KEEPCOUNT_DEMO_PROCESSES';

/** How the workers count together: host-shared memory, or Redis on a port. */
export type Sharing = { kind: 'shared' } | { kind: 'redis'; port: number };

/** The running workers: their ports (one, shared, for `'shared'`), the in-flight count, and how to stop them. */
export interface Workers {
  ports: number[];
  /** Calls in flight to the upstream, over every worker. */
  inflight(): Promise<number>;
  stop(): Promise<void>;
}

/** A worker that failed to start: an expected failure, reported without a stack trace. */
export class WorkerStartError extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'WorkerStartError';
  }
}

/** A worker's report of an error that stopped it before it listened. */
interface WorkerFailure {
  error: string;
  code?: string;
}

/**
 * Forks `count` proxy workers in front of `upstreamPort`; resolves once every one listens. If any
 * fails to start, every worker forked is killed (their IPC channels would keep this process up)
 * and the segments removed before the error is rethrown.
 */
export async function startWorkers(count: number, upstreamPort: number, sharing: Sharing): Promise<Workers> {
  const prefix = `keepcount-demo-${process.pid}`;
  const env: Record<string, string> = { [UPSTREAM_PORT]: String(upstreamPort) };
  let shared: ReturnType<typeof openShared> | undefined;
  if (sharing.kind === 'shared') {
    // Each worker holds an in-flight slot, and so does this process, which reads the count.
    const processes = count + 1;
    try {
      shared = openShared(prefix, processes);
    } catch (error) {
      // E.g. ERR_KEEPCOUNT_UNSUPPORTED on the fallback (nothing to remove then), or the rate's
      // segment made and the in-flight one refused.
      try {
        unlinkShared(prefix);
      } catch {
        // Nothing was made.
      }
      throw error;
    }
    // Named by this process: removed when it exits, also by Ctrl-C (the mappings stay valid).
    removeOnExit(prefix);
    env[PREFIX] = prefix;
    env[PROCESSES] = String(processes);
  } else {
    env[REDIS_PORT] = String(sharing.port);
  }
  const forked: Worker[] = [];
  let ports: number[];
  try {
    ports = await Promise.all(
      Array.from(
        { length: count },
        () =>
          new Promise<number>((resolve, reject) => {
            const worker = cluster.fork(env);
            forked.push(worker);
            worker.once('message', (message: number | WorkerFailure) => {
              if (typeof message === 'number') return resolve(message);
              reject(new WorkerStartError(`a demo worker failed to start: ${message.error}`, message.code));
            });
            worker.once('error', reject);
            worker.once('exit', (code, signal) =>
              reject(new WorkerStartError(`a demo worker exited with ${signal ?? code} before it listened`)),
            );
          }),
      ),
    );
    // Workers listening on port 0 share the primary's one handle, so they report one port; with
    // `exclusive` (Redis) each binds its own.
    const distinct = new Set(ports).size;
    if (distinct !== (sharing.kind === 'shared' ? 1 : count)) {
      throw new Error(`demo workers listen on unexpected ports: ${ports.join(', ')}`);
    }
  } catch (error) {
    await Promise.all(forked.map(kill));
    shared?.inflight.close();
    if (sharing.kind === 'shared') unlinkShared(prefix);
    throw error;
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

/** Kills `worker` (if still running) and resolves once it has exited. */
function kill(worker: Worker): Promise<void> {
  return new Promise((resolve) => {
    if (worker.process.exitCode !== null || worker.process.signalCode !== null) return resolve();
    worker.process.once('exit', () => resolve());
    worker.process.kill('SIGKILL');
  });
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
  let synced: ReturnType<typeof syncedCounters> | undefined;
  let counters: Counters;
  try {
    synced = redisPort === undefined ? undefined : syncedCounters(Number(redisPort));
    counters = synced?.counters ?? openShared(process.env[PREFIX]!, Number(process.env[PROCESSES]));
  } catch (error) {
    // E.g. ERR_KEEPCOUNT_FULL: the primary reports it and stops every worker.
    const { message, code } = error as Error & { code?: unknown };
    const failure: WorkerFailure = { error: message, ...(typeof code === 'string' ? { code } : {}) };
    process.send!(failure, () => process.exit(1));
    return;
  }
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
