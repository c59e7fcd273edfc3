/**
 * keepcount/redis against one local `redis-server` (started here on a free loopback port, in a
 * temporary directory, and stopped): `node --import=tsx benchmark/redis.ts [--quick] --out
 * results.json`. Three measurements (issue 15's benchmarks):
 *
 * 1. **Per-check cost**: `SyncedWindowQuota.consume` (what keepcount's `rateLimit` calls per
 *    request; syncing every 100 ms in the background, its cost included: the loop yields to the
 *    event loop every 1,024 checks so the syncs run; TypeScript on either backend, see
 *    lib/redis/hasher.ts) against express-rate-limit's
 *    `rate-limit-redis` store `increment` and rate-limiter-flexible's `RateLimiterRedis.consume`,
 *    each awaited, one at a time (a request waits for its own check) and 256 at a time (the
 *    server's throughput with many requests in flight). One ioredis client per contender.
 * 2. **Redis commands per node per second** at `syncMs` 100 under as many checks as 3 nodes in
 *    this process can make, from Redis' own `INFO commandstats` (EVALSHA + EVAL calls).
 * 3. **Overshoot and wrong decisions** on a seeded, replayable trace: Poisson arrivals of Zipf(1.1)
 *    client keys, each sent to one of 3 nodes at random as a load balancer would, replayed in real
 *    time. The nodes are in this process, each with its own ioredis client and `RedisSync` (so
 *    their syncs go over separate connections, though they share one event loop). Each request's
 *    decision is compared with an exact global count of the same stream in the same windows.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { RedisStore } from 'rate-limit-redis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import type { Options as ErlOptions } from 'express-rate-limit';
import { startRedis } from '../tools/redis-server.js';
import { makeKeys, prng, stream } from './data.js';
import { keepcountRedis } from './package.js';

type RedisApi = typeof keepcountRedis;

/** A window quota's limit that no contender ever reaches: every check does the same work. */
const HUGE = 1e12;
/** Checks between yields to the event loop in keepcount's loop (lets the sync timer run). */
const BATCH = 1024;
/** Checks in flight at once in the concurrent runs. */
const IN_FLIGHT = 256;

export interface CostCase {
  name: string;
  /** Median µs per check over the rounds. */
  us: number;
  rounds: number[];
}

export interface TraceResult {
  nodes: number;
  syncMs: number;
  seconds: number;
  requestsPerS: number;
  keys: number;
  limit: number;
  windowMs: number;
  requests: number;
  /** (window, key) pairs whose requests exceeded the limit. */
  overLimit: number;
  /** The largest admissions − limit of any (window, key), and the key's rank (0 = hottest). */
  maxOvershoot: number;
  maxOvershootRank: number;
  /**
   * The stated bound's slack (n − 1) × r × 2 × (syncMs + RTT) for that (window, key), with
   * r × 2 × (syncMs + RTT) the busiest node's requests for the key in its busiest such span.
   */
  boundAtMax: number;
  /** (window, key) pairs whose admissions exceeded the stated bound. */
  overBound: number;
  /** Worst overshoot / slack over every (window, key) over its limit. */
  worstBoundRatio: number;
  longestSyncGapMs: number;
  maxRoundTripMs: number;
  /** Redis' CPU seconds (user + system) per second of the replay: how busy the syncs kept it. */
  redisCpuPerS: number;
  wronglyAdmitted: number;
  wronglyRefused: number;
}

export interface RedisResults {
  redisVersion: string;
  quick: boolean;
  checksPerRound: { keepcount: number; redis: number };
  rounds: number;
  sequential: CostCase[];
  concurrent: CostCase[];
  commands: {
    nodes: number;
    syncMs: number;
    seconds: number;
    checksPerNodePerS: number;
    commandsPerNodePerS: number;
    /** Redis' CPU seconds per second meanwhile. */
    redisCpuPerS: number;
  };
  trace: TraceResult;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function connect(port: number): Redis {
  return new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: null });
}

/** A node: its own client, sync and quota. */
interface Node {
  client: Redis;
  sync: InstanceType<RedisApi['RedisSync']>;
  quota: InstanceType<RedisApi['SyncedWindowQuota']>;
}

function node(
  redis: RedisApi,
  port: number,
  options: {
    name: string;
    limit: number;
    windowMs: number;
    syncMs: number;
    clock?: { now(): number };
    heavyHitters?: { threshold: number };
  },
): Node {
  const client = connect(port);
  const sync = new redis.RedisSync({ sendCommand: redis.ioredisSender(client), syncMs: options.syncMs });
  const quota = new redis.SyncedWindowQuota({
    sync,
    name: options.name,
    seed: 7,
    limit: options.limit,
    windowMs: options.windowMs,
    clock: options.clock,
    heavyHitters: options.heavyHitters,
  });
  return { client, sync, quota };
}

async function closeNode(n: Node): Promise<void> {
  n.quota.close();
  await n.sync.close();
  n.client.disconnect();
}

/** `INFO commandstats`: calls of EVALSHA plus EVAL so far. */
async function scriptCalls(client: Redis): Promise<number> {
  const info = await client.info('commandstats');
  let calls = 0;
  for (const m of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(m[2]);
  return calls;
}

/** `INFO cpu`: Redis' CPU seconds so far, user + system. */
async function redisCpu(client: Redis): Promise<number> {
  const info = await client.info('cpu');
  const field = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? NaN);
  return field('used_cpu_user') + field('used_cpu_sys');
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean', default: false }, out: { type: 'string' } },
  });
  const quick = values.quick;
  const rounds = quick ? 1 : 5;
  const kcChecks = quick ? 20_000 : 500_000;
  const redisChecks = quick ? 300 : 4_000;
  const server = await startRedis();
  const info = connect(server.port);
  try {
    const redisVersion = /redis_version:(\S+)/.exec(await info.info('server'))?.[1] ?? 'unknown';
    console.log(`redis-server ${redisVersion} on 127.0.0.1:${server.port}`);
    const keys = makeKeys(10_000, 1 << 16);
    const zipf = stream(keys.ips, keys.zipf);

    // 1. Per-check cost.
    const kcNodes = [
      {
        name: 'keepcount SyncedWindowQuota.consume, syncMs 100',
        node: node(keepcountRedis, server.port, { name: 'cost', limit: HUGE, windowMs: 3_600_000, syncMs: 100 }),
      },
      {
        // Threshold 1: every client counted exactly too (10,000 of them, within the default
        // capacity), its exact counts synced beside the sketch.
        name: 'keepcount SyncedWindowQuota.consume, heavyHitters (threshold 1), syncMs 100',
        node: node(keepcountRedis, server.port, {
          name: 'cost-heavy',
          limit: HUGE,
          windowMs: 3_600_000,
          syncMs: 100,
          heavyHitters: { threshold: 1 },
        }),
      },
    ];
    const erlClient = connect(server.port);
    const erl = new RedisStore({
      sendCommand: (...args: string[]) => erlClient.call(args[0]!, ...args.slice(1)) as Promise<number>,
      prefix: 'erl:',
    });
    erl.init({ windowMs: 3_600_000 } as ErlOptions);
    const rlfClient = connect(server.port);
    const rlf = new RateLimiterRedis({ storeClient: rlfClient, points: HUGE, duration: 3600, keyPrefix: 'rlf' });

    // Same answers first: five checks of one fresh key count 1..5 everywhere.
    for (let i = 1; i <= 5; i++) {
      const counts = [
        ...kcNodes.map((k) => k.node.quota.consume('check').count),
        (await erl.increment('check')).totalHits,
        (await rlf.consume('check')).consumedPoints,
      ];
      if (counts.some((c) => c !== i)) throw new Error(`contenders disagree on check ${i}: ${counts.join(', ')}`);
    }
    console.log('checked: every contender counts one fresh key 1..5 alike');

    type Timed = { name: string; run(checks: number, offset: number): Promise<number> };
    const sequential: Timed[] = [
      ...kcNodes.map((k): Timed => ({
        name: k.name,
        async run(checks, offset) {
          const started = performance.now();
          for (let i = 0; i < checks;) {
            const end = Math.min(checks, i + BATCH);
            for (; i < end; i++) k.node.quota.consume(zipf[(offset + i) % zipf.length]!);
            await yieldToLoop();
          }
          return ((performance.now() - started) * 1000) / checks;
        },
      })),
      {
        name: 'rate-limit-redis RedisStore.increment, awaited one at a time',
        async run(checks, offset) {
          const started = performance.now();
          for (let i = 0; i < checks; i++) await erl.increment(zipf[(offset + i) % zipf.length]!);
          return ((performance.now() - started) * 1000) / checks;
        },
      },
      {
        name: 'rate-limiter-flexible RateLimiterRedis.consume, awaited one at a time',
        async run(checks, offset) {
          const started = performance.now();
          for (let i = 0; i < checks; i++) await rlf.consume(zipf[(offset + i) % zipf.length]!);
          return ((performance.now() - started) * 1000) / checks;
        },
      },
    ];
    const inFlight = (name: string, check: (key: string) => Promise<unknown>): Timed => ({
      name: `${name}, ${IN_FLIGHT} in flight`,
      async run(checks, offset) {
        const started = performance.now();
        for (let i = 0; i < checks; i += IN_FLIGHT) {
          const batch: Promise<unknown>[] = [];
          for (let j = i; j < Math.min(checks, i + IN_FLIGHT); j++)
            batch.push(check(zipf[(offset + j) % zipf.length]!));
          await Promise.all(batch);
        }
        return ((performance.now() - started) * 1000) / checks;
      },
    });
    const concurrent: Timed[] = [
      inFlight('rate-limit-redis RedisStore.increment', (k) => erl.increment(k)),
      inFlight('rate-limiter-flexible RateLimiterRedis.consume', (k) => rlf.consume(k)),
    ];
    const timings = new Map<string, number[]>();
    const all = [...sequential, ...concurrent];
    for (let round = 0; round < rounds; round++) {
      // Rotated each round so no contender always runs first or last.
      for (let c = 0; c < all.length; c++) {
        const timed = all[(c + round) % all.length]!;
        const keepcount = timed.name.startsWith('keepcount');
        const checks = keepcount ? kcChecks : timed.name.includes('in flight') ? 4 * redisChecks : redisChecks;
        const us = await timed.run(checks, round * 7919);
        timings.set(timed.name, [...(timings.get(timed.name) ?? []), us]);
        console.log(`round ${round + 1}: ${timed.name}: ${us.toFixed(3)} µs/check`);
      }
    }
    const result = (t: Timed): CostCase => ({
      name: t.name,
      us: median(timings.get(t.name)!),
      rounds: timings.get(t.name)!,
    });
    for (const k of kcNodes) await closeNode(k.node);
    erlClient.disconnect();
    rlfClient.disconnect();

    // 2. Commands per node per second at syncMs 100, the nodes checking as fast as they can.
    const syncMs = 100;
    const commandSeconds = quick ? 1 : 5;
    const busy = Array.from({ length: 3 }, () =>
      node(keepcountRedis, server.port, { name: 'commands', limit: 100, windowMs: 1000, syncMs }),
    );
    for (const n of busy) await n.sync.flush();
    const callsBefore = await scriptCalls(info);
    const cpuBefore = await redisCpu(info);
    const started = performance.now();
    let checks = 0;
    while (performance.now() - started < commandSeconds * 1000) {
      for (let i = 0; i < BATCH; i++, checks++) busy[checks % 3]!.quota.consume(zipf[checks % zipf.length]!);
      await yieldToLoop();
    }
    const elapsedS = (performance.now() - started) / 1000;
    const calls = (await scriptCalls(info)) - callsBefore;
    const cpu = (await redisCpu(info)) - cpuBefore;
    for (const n of busy) await closeNode(n);
    const commands = {
      nodes: 3,
      syncMs,
      seconds: elapsedS,
      checksPerNodePerS: checks / 3 / elapsedS,
      commandsPerNodePerS: calls / 3 / elapsedS,
      redisCpuPerS: cpu / elapsedS,
    };
    console.log(
      `commands: ${commands.checksPerNodePerS.toFixed(0)} checks/s per node, ` +
        `${commands.commandsPerNodePerS.toFixed(2)} Redis commands/s per node (INFO commandstats) at syncMs ${syncMs}, ` +
        `Redis busy ${(commands.redisCpuPerS * 100).toFixed(0)}% of a core`,
    );

    // 3. The trace.
    const trace = await replay(keepcountRedis, server.port, info, quick);
    console.log(JSON.stringify(trace, null, 2));

    const results: RedisResults = {
      redisVersion,
      quick,
      checksPerRound: { keepcount: kcChecks, redis: redisChecks },
      rounds,
      sequential: sequential.map(result),
      concurrent: concurrent.map(result),
      commands,
      trace,
    };
    if (values.out !== undefined) writeFileSync(values.out, JSON.stringify(results, null, 2) + '\n');
  } finally {
    info.disconnect();
    await server.stop();
  }
}

/**
 * Replays the trace through 3 synced nodes and an exact global count side by side. Time is read
 * once per 1 ms tick and given to the nodes as their clock, so they and the exact count agree on
 * every request's window.
 */
async function replay(redis: RedisApi, port: number, info: Redis, quick: boolean): Promise<TraceResult> {
  const nodes = 3;
  const syncMs = 100;
  const windowMs = 1000;
  const limit = 50;
  const distinct = 10_000;
  const seconds = quick ? 2 : 12;
  const requestsPerS = quick ? 5_000 : 15_000;
  // The trace: arrival offsets (Poisson), key ranks (Zipf), nodes (uniform), all seeded.
  const count = seconds * requestsPerS;
  const keys = makeKeys(distinct, count, 11);
  const random = prng(13);
  const at = new Float64Array(count);
  const to = new Uint8Array(count);
  for (let i = 0, t = 0; i < count; i++) {
    t += (-Math.log(1 - random()) * 1000) / requestsPerS;
    at[i] = t;
    to[i] = Math.floor(random() * nodes);
  }

  let now = Date.now();
  const clock = { now: () => now };
  const fleet = Array.from({ length: nodes }, () =>
    node(redis, port, { name: 'trace', limit, windowMs, syncMs, clock }),
  );
  const gaps = fleet.map(() => ({ last: performance.now(), longest: 0 }));
  fleet.forEach((n, k) =>
    n.sync.on('sync', () => {
      const t = performance.now();
      gaps[k]!.longest = Math.max(gaps[k]!.longest, t - gaps[k]!.last);
      gaps[k]!.last = t;
    }),
  );
  let maxRoundTripMs = 0;
  for (const n of fleet) await n.sync.flush();
  for (const g of gaps) {
    g.last = performance.now();
    g.longest = 0;
  }

  // Per (window, key rank): requests, exact admissions, synced admissions, requests per node.
  interface Cell {
    requests: number;
    admitted: number;
    /** When each node saw this key's requests (ms since the start), in order. */
    perNode: number[][];
  }
  const cells = new Map<string, Cell>();
  let wronglyAdmitted = 0;
  let wronglyRefused = 0;
  const cpuBefore = await redisCpu(info);
  const start = performance.now();
  let i = 0;
  while (i < count) {
    now = Date.now();
    const elapsed = performance.now() - start;
    for (; i < count && at[i]! <= elapsed; i++) {
      const rank = keys.zipf[i]!;
      const window = Math.floor(now / windowMs);
      const id = `${window}:${rank}`;
      let cell = cells.get(id);
      if (cell === undefined) {
        cells.set(id, (cell = { requests: 0, admitted: 0, perNode: Array.from({ length: nodes }, () => []) }));
      }
      cell.requests++;
      cell.perNode[to[i]!]!.push(elapsed);
      // The exact global decision counts refused requests too, as WindowQuota does.
      const exact = cell.requests <= limit;
      const synced = fleet[to[i]!]!.quota.consume(keys.ips[rank]!).allowed;
      if (synced) cell.admitted++;
      if (synced && !exact) wronglyAdmitted++;
      if (!synced && exact) wronglyRefused++;
    }
    for (const n of fleet) maxRoundTripMs = Math.max(maxRoundTripMs, n.sync.stats.lastRoundTripMs);
    await sleep(1);
  }
  const redisCpuPerS = ((await redisCpu(info)) - cpuBefore) / ((performance.now() - start) / 1000);
  const longestSyncGapMs = Math.max(...gaps.map((g) => g.longest));
  for (const n of fleet) await closeNode(n);

  let overLimit = 0;
  let overBound = 0;
  let maxOvershoot = 0;
  let maxOvershootRank = -1;
  let boundAtMax = 0;
  let worstBoundRatio = 0;
  for (const [id, cell] of cells) {
    if (cell.requests <= limit) continue;
    overLimit++;
    // The bound's r × 2 × (syncMs + RTT) is what one node can admit while the others cannot see
    // it: here the most requests the busiest node saw for this key in any span of twice the
    // longest measured gap between one node's successful syncs. (Its mean rate over the window
    // would understate it: arrivals bunch, and the trace is replayed in batches when the loop
    // falls behind.)
    const span = 2 * longestSyncGapMs;
    const peak = Math.max(...cell.perNode.map((times) => mostWithin(times, span)));
    const slack = (nodes - 1) * peak;
    const overshoot = cell.admitted - limit;
    if (overshoot > slack) overBound++;
    if (overshoot > 0) worstBoundRatio = Math.max(worstBoundRatio, overshoot / slack);
    if (overshoot > maxOvershoot) {
      maxOvershoot = overshoot;
      maxOvershootRank = Number(id.split(':')[1]);
      boundAtMax = slack;
    }
  }
  return {
    nodes,
    syncMs,
    seconds,
    requestsPerS,
    keys: distinct,
    limit,
    windowMs,
    requests: count,
    overLimit,
    maxOvershoot,
    maxOvershootRank,
    boundAtMax,
    overBound,
    worstBoundRatio,
    longestSyncGapMs,
    maxRoundTripMs,
    redisCpuPerS,
    wronglyAdmitted,
    wronglyRefused,
  };
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});

/** The most of the sorted `times` within any span of `span` ms. */
function mostWithin(times: number[], span: number): number {
  let most = 0;
  for (let first = 0, last = 0; last < times.length; last++) {
    while (times[last]! - times[first]! > span) first++;
    most = Math.max(most, last - first + 1);
  }
  return most;
}
