/**
 * keepcount/redis: keepcount's counters shared by many machines through Redis ≥ 7 (or Valkey).
 *
 * Each node answers from its own sketch plus the others' counts as of its last sync; a
 * {@link RedisSync} pushes the cells it changed and pulls those the others changed every `syncMs`
 * in one script call, so a check never waits on the network and Redis sees about `1000 / syncMs`
 * commands per node per second whatever the request rate. Syncs are idempotent (nodes push
 * cumulative counts with sequence numbers the script checks), survive failures (what a failed
 * sync could not push goes with the next) and rebuild the global state from the nodes' own
 * counts after Redis loses it.
 *
 * In the same script call, {@link SyncedInflight} holds each node's in-flight slots under a lease
 * its syncs renew (a crashed node's slots leave the count within one lease), and
 * {@link SyncedLimiter} borrows tokens from each key's bucket in Redis in proportion to demand, so
 * token-bucket quotas hold for the fleet within a stated slack. A {@link SyncedWindowQuota} with
 * `heavyHitters` syncs exact counts of the clients near its limit beside its sketch, so a flood
 * of distinct addresses refuses no client within its limit (up to the table's capacity).
 *
 * Talks to Redis through a `sendCommand` function ({@link ioredisSender}, {@link nodeRedisSender},
 * {@link nodeRedisClusterSender} or your own); ioredis and redis are optional peer dependencies,
 * never loaded here. Redis Cluster works with `RedisSync`'s `cluster: true`: each structure's keys
 * share a hash tag, and a sync sends one script call per structure.
 *
 * @module
 */
export { RedisSync } from './sync.js';
export type { RedisSyncOptions, SyncStats } from './sync-types.js';
export { SyncedEstimator, type SyncedEstimatorOptions } from './estimator.js';
export { SyncedInflight, type SyncedInflightOptions } from './inflight.js';
export { SyncedLimiter, type SyncedLimiterOptions } from './limiter.js';
export { SyncedRate, type SyncedRateOptions } from './rate.js';
export type { FailPolicy } from './fail-policy.js';
export {
  SyncedWindowQuota,
  type SyncedHeavyHitterSettings,
  type SyncedHeavyHitterStats,
  type SyncedWindowQuotaOptions,
} from './window-quota.js';
export {
  ioredisSender,
  nodeRedisClusterSender,
  nodeRedisSender,
  type IoredisLike,
  type NodeRedisClusterLike,
  type NodeRedisLike,
  type SendCommand,
} from './send.js';
