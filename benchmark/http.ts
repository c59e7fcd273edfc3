/**
 * The end-to-end HTTP benchmark: `node --import=tsx benchmark/http.ts [--quick] --out http.json`.
 *
 * For each setup of `http-server.ts` (a hello-world on node:http, Express or Fastify, bare or
 * behind a limiter), this process starts the server in a child process, drives it with autocannon
 * (32 connections, a fresh client address in `X-Forwarded-For` on every request, so the limiter
 * sees as many distinct clients as requests), and records requests per second, p99 latency and the
 * server's RSS growth over the run. Setups are interleaved round by round (each round starts every
 * setup afresh) and each figure is the median over rounds; a ratio between two setups is the median
 * of their ratios within each round. Server and load generator share the
 * machine's cores, as they would on one host; the report says how many there were.
 */
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { SETUPS } from './http-server.js';
import { addresses, CONNECTIONS, drive, startServer } from './load.js';

export interface HttpCase {
  setup: string;
  /** Median requests per second over rounds. */
  rps: number;
  /** Requests per second in each round, in round order: ratios pair setups within a round. */
  roundRps: number[];
  /** Median p99 latency in ms. */
  p99: number;
  /** Median server RSS growth over a run, bytes. */
  rssGrowth: number;
  /** Requests sent in one run (median), so also the distinct client keys the limiter saw. */
  requests: number;
  /** Non-2xx answers over all rounds: must be 0 (every limiter admits everything). */
  non2xx: number;
}

export interface HttpResults {
  connections: number;
  seconds: number;
  rounds: number;
  cores: number;
  cases: HttpCase[];
}

interface Run {
  rps: number;
  p99: number;
  rssGrowth: number;
  requests: number;
  non2xx: number;
}

async function runOnce(setup: string, seconds: number): Promise<Run> {
  const server = await startServer(join(__dirname, 'http-server.ts'), setup);
  try {
    const next = addresses();
    // A short warm-up so the JIT has compiled the hot path before the measured run.
    await drive(server.port, Math.max(1, seconds / 4), next);
    const before = await server.ask<number>('rss');
    const result = await drive(server.port, seconds, next);
    const after = await server.ask<number>('rss');
    return {
      rps: result.requests.average,
      p99: result.latency.p99,
      rssGrowth: after - before,
      requests: result.requests.total,
      non2xx: result.non2xx + result.errors,
    };
  } finally {
    server.stop();
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function runHttp(quick: boolean): Promise<HttpResults> {
  // Five short rounds rather than two long ones: the load on a shared VM drifts over minutes, so
  // ratios are taken within a round (see `relativeRps` in report.ts) and their median drops the
  // rounds a neighbour's burst spoiled.
  const seconds = quick ? 1 : 4;
  const rounds = quick ? 1 : 5;
  const names = Object.keys(SETUPS);
  const runs = new Map<string, Run[]>(names.map((n) => [n, []]));
  for (let round = 0; round < rounds; round++) {
    // Rotate the order each round so no setup always runs first or last.
    const order = names.map((_, i) => names[(i + round) % names.length]!);
    for (const setup of order) {
      console.log(`http ${setup} (round ${round + 1}/${rounds})`);
      runs.get(setup)!.push(await runOnce(setup, seconds));
    }
  }
  return {
    connections: CONNECTIONS,
    seconds,
    rounds,
    cores: availableParallelism(),
    cases: names.map((setup) => {
      const r = runs.get(setup)!;
      return {
        setup,
        rps: median(r.map((x) => x.rps)),
        roundRps: r.map((x) => x.rps),
        p99: median(r.map((x) => x.p99)),
        rssGrowth: median(r.map((x) => x.rssGrowth)),
        requests: median(r.map((x) => x.requests)),
        non2xx: r.reduce((sum, x) => sum + x.non2xx, 0),
      };
    }),
  };
}

if (require.main === module) {
  const { values } = parseArgs({
    options: { quick: { type: 'boolean', default: false }, out: { type: 'string' } },
  });
  runHttp(values.quick)
    .then((results) => {
      const json = JSON.stringify(results, null, 2) + '\n';
      if (values.out !== undefined) writeFileSync(values.out, json);
      else process.stdout.write(json);
    })
    .catch((error: unknown) => {
      console.error(error);
      process.exit(1);
    });
}
