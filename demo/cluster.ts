/**
 * `--cluster N`: the protected proxy as N `node:cluster` workers on one port, their rate limit and
 * upstream in-flight cap in counters every process of the host shares (`openShared`), so that the
 * limits hold for the workers together instead of N times over.
 */
import cluster from 'node:cluster';
import type { AddressInfo } from 'node:net';
import { openShared, proxy, unlinkShared } from './servers.js';

/** What the primary tells each worker (its environment). */
const UPSTREAM_PORT = 'KEEPCOUNT_DEMO_UPSTREAM_PORT';
const PREFIX = 'KEEPCOUNT_DEMO_SHARED';

/** The running workers: their common port, the shared in-flight count, and how to stop them. */
export interface Workers {
  port: number;
  inflight(): number;
  stop(): Promise<void>;
}

/** Forks `count` proxy workers in front of `upstreamPort`; resolves once every one listens. */
export async function startWorkers(count: number, upstreamPort: number): Promise<Workers> {
  const prefix = `keepcount-demo-${process.pid}`;
  // A previous run killed before cleaning up leaves its segments: start from zero.
  unlinkShared(prefix);
  const shared = openShared(prefix);
  const env = { [UPSTREAM_PORT]: String(upstreamPort), [PREFIX]: prefix };
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
  // Workers listening on port 0 share the primary's one handle, so they report one port.
  if (new Set(ports).size !== 1) throw new Error(`demo workers listen on different ports: ${ports.join(', ')}`);
  return {
    port: ports[0]!,
    inflight: () => shared.inflight.get('origin'),
    async stop() {
      await Promise.all(
        Object.values(cluster.workers ?? {}).map(
          (worker) =>
            new Promise<void>((resolve) => {
              worker!.once('exit', () => resolve());
              worker!.disconnect();
            }),
        ),
      );
      unlinkShared(prefix);
    },
  };
}

/** A worker's life: the proxy on the shared counters, listening until the primary disconnects it. */
export function runWorker(): void {
  const { server } = proxy(Number(process.env[UPSTREAM_PORT]), openShared(process.env[PREFIX]!));
  server.listen(0, '127.0.0.1', () => process.send!((server.address() as AddressInfo).port));
}
