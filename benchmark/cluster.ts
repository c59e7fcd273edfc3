/**
 * One limit for the processes of a host: `node --import=tsx benchmark/cluster.ts [--quick] --out f.json`.
 *
 * A `node:cluster` primary and two workers, as a service runs them. Each worker checks a stream of
 * client addresses against a per-client limit held for both workers together, two ways:
 * - keepcount: a `WindowQuota` counting in `Rate.openShared` (a segment in `/dev/shm`, an atomic
 *   add per check, no message to anyone);
 * - rate-limiter-flexible's `RateLimiterCluster`: every `consume` is a message to the primary's
 *   `RateLimiterClusterMaster` and back, awaited one at a time (the latency a request sees) and
 *   with 64 in flight (its best throughput, which a request does not see: each still waits for its
 *   round trip).
 * Both workers run each contender at the same time, so the primary serves two workers as it would
 * in production, and per-check cost is wall time over checks. Same keys, same order, same limits
 * (high enough that nobody is refused: refusals cost rate-limiter-flexible an exception).
 *
 * Needs the native backend (shared memory); on the fallback it records why it did not run.
 */
import cluster from 'node:cluster';
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { RateLimiterCluster, RateLimiterClusterMaster } from 'rate-limiter-flexible';
import { makeKeys } from './data.js';
import { keepcount, keepcountHttp } from './package.js';

const { backend, Rate } = keepcount;
const { WindowQuota } = keepcountHttp;

export interface ClusterResults {
  workers: number;
  checks: number;
  /** Per check, ns, the slower worker's figure for each contender (keepcount's: the median run). */
  keepcountNs?: number;
  /** keepcount's runs, in order: before, between and after rate-limiter-flexible's. */
  keepcountRounds?: number[];
  rlfAwaitedNs?: number;
  rlfPipelinedNs?: number;
  /** Why nothing was timed. */
  skipped?: string;
}

const WORKERS = 2;
const NAME = 'keepcount-bench-cluster';
const SEED = 0x5eed_c1a5_7e5n;
const WINDOW_MS = 60_000;
const LIMIT = 1_000_000_000;
const IN_FLIGHT = 64;

type Contender = 'keepcountNs' | 'rlfAwaitedNs' | 'rlfPipelinedNs';

/**
 * What a worker reports for one contender. The IPC channel also carries rate-limiter-flexible's
 * own messages, so ours are marked.
 */
interface Timing {
  bench: 'keepcount';
  contender: Contender;
  ns: number;
}

const isTiming = (m: unknown): m is Timing => (m as Timing | undefined)?.bench === 'keepcount';

async function primary(): Promise<void> {
  const { values } = parseArgs({ options: { quick: { type: 'boolean', default: false }, out: { type: 'string' } } });
  const checks = values.quick ? 2_000 : 200_000;
  const results: ClusterResults = { workers: WORKERS, checks };
  if (backend !== 'native') {
    results.skipped = `the ${backend} backend cannot share memory between processes`;
  } else {
    Rate.unlink(NAME);
    // The primary answers every worker's RateLimiterCluster; it must exist before they ask.
    new RateLimiterClusterMaster();
    cluster.setupPrimary({ execArgv: ['--import=tsx'] });
    const workers = Array.from({ length: WORKERS }, () => cluster.fork({ KEEPCOUNT_BENCH_CHECKS: String(checks) }));
    /** The next timing `w` reports (its first, sent once listening, says it is ready). */
    const next = (w: (typeof workers)[number]) =>
      new Promise<Timing>((resolve) => {
        const take = (m: unknown) => {
          if (!isTiming(m)) return;
          w.off('message', take);
          resolve(m);
        };
        w.on('message', take);
      });
    await Promise.all(workers.map(next));
    // Each contender starts on both workers together: the primary tells them when. keepcount's
    // runs take a fraction of a second, so it runs around each of rate-limiter-flexible's (taking
    // minutes) and its figure is the median of three: one run alone was a cold JIT's or a busy
    // neighbour's.
    const order: Contender[] = ['keepcountNs', 'rlfAwaitedNs', 'keepcountNs', 'rlfPipelinedNs', 'keepcountNs'];
    const runs = new Map<Contender, number[]>();
    for (const contender of order) {
      const done = workers.map(next);
      for (const w of workers) w.send({ bench: 'keepcount', contender, ns: 0 } satisfies Timing);
      const slower = Math.max(...(await Promise.all(done)).map((t) => t.ns));
      runs.set(contender, [...(runs.get(contender) ?? []), slower]);
    }
    for (const w of workers) w.disconnect();
    for (const [contender, ns] of runs) results[contender] = ns.sort((a, b) => a - b)[Math.floor(ns.length / 2)];
    results.keepcountRounds = runs.get('keepcountNs');
    Rate.unlink(NAME);
  }
  const line = JSON.stringify(results);
  console.log(line);
  if (values.out !== undefined) writeFileSync(values.out, line + '\n');
}

function worker(): void {
  const checks = Number(process.env.KEEPCOUNT_BENCH_CHECKS);
  const keys = makeKeys(10_000, checks, 11);
  const stream = Array.from(keys.uniform, (i) => keys.ips[i]!);
  const rate = Rate.openShared(NAME, { intervalMs: WINDOW_MS, seed: SEED });
  const quota = new WindowQuota({ limit: LIMIT, windowMs: WINDOW_MS, rate });
  const rlf = new RateLimiterCluster({
    keyPrefix: 'bench',
    points: LIMIT,
    duration: WINDOW_MS / 1000,
    timeoutMs: 60_000,
  });

  const contenders: Record<Contender, () => Promise<void>> = {
    keepcountNs: async () => {
      let refused = 0;
      for (const key of stream) if (!quota.consume(key).allowed) refused++;
      if (refused !== 0) throw new Error(`keepcount refused ${refused} checks under a limit of ${LIMIT}`);
    },
    rlfAwaitedNs: async () => {
      for (const key of stream) await rlf.consume(key);
    },
    rlfPipelinedNs: async () => {
      let next = 0;
      const lane = async (): Promise<void> => {
        while (next < stream.length) await rlf.consume(stream[next++]!);
      };
      await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
    },
  };
  process.on('message', (m: unknown) => {
    if (!isTiming(m)) return;
    void (async () => {
      const start = process.hrtime.bigint();
      await contenders[m.contender]();
      const ns = Number(process.hrtime.bigint() - start) / stream.length;
      process.send!({ bench: 'keepcount', contender: m.contender, ns } satisfies Timing);
    })();
  });
  process.on('disconnect', () => rate.close());
  process.send!({ bench: 'keepcount', contender: 'keepcountNs', ns: 0 } satisfies Timing);
}

if (cluster.isPrimary) void primary();
else worker();
