/**
 * `--redis`: the rate limit of every proxy process is one `SyncedWindowQuota`, synced through a
 * `redis-server` the demo starts on a free loopback port in a temporary directory (and stops);
 * each process stands for a machine behind a load balancer, on a port of its own.
 */
import { Redis } from 'ioredis';
import { RedisSync, SyncedWindowQuota, ioredisSender } from '../lib/redis/index.js';
import { protection, type Counters } from './servers.js';

/** How often each proxy syncs: a tenth of the default, so the 1 s windows see fresh counts. */
export const DEMO_SYNC_MS = 50;

/**
 * The seed every proxy hashes client keys with (a synced sketch needs one seed). Fixed for the demo;
 * a service keeps its seed secret (README, "Heavy hitters").
 */
const SEED = 0x6b656570n;

/** A proxy process's rate limit synced through Redis on `port`, and how to let it go. */
export function syncedCounters(port: number): { counters: Counters; close(): Promise<void> } {
  const client = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: null });
  // A sync that fails is counted and retried by the RedisSync; the client's own reports are noise here.
  client.on('error', () => undefined);
  const sync = new RedisSync({ sendCommand: ioredisSender(client), syncMs: DEMO_SYNC_MS });
  const quota = new SyncedWindowQuota({
    sync,
    name: 'demo',
    seed: SEED,
    limit: protection.limit,
    windowMs: protection.windowMs,
  });
  return {
    counters: { quota },
    async close() {
      await sync.close();
      client.disconnect();
    },
  };
}
