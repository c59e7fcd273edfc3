/**
 * The end-to-end HTTP benchmark: `node --import=tsx benchmark/http.ts [--quick] [--setup NAME]…
 * [--pair SETUP:OTHER]… --out http.json`.
 *
 * For each setup of `http-server.ts` (a hello-world on node:http, Express or Fastify behind a
 * limiter), this process starts the server in a child process beside its framework's bare server,
 * drives both at once with autocannon (32 connections each, a fresh client address in
 * `X-Forwarded-For` on every request, so the limiter sees as many distinct clients as requests),
 * and records requests per second, p99 latency, and the servers' RSS growth and CPU time per
 * request over the run (see {@link runHttp} for why side by side). Setups are interleaved round by
 * round (each round starts every server afresh) and each figure is the median over rounds; a ratio
 * between two setups is the median over rounds of their ratios to the bare server beside them.
 * With two cores or more the servers run on one and autocannon on the others (`splitCores` in
 * load.ts), so what a limiter costs comes out of the servers' core; the report says which cores
 * each side had. A limiter with a floor ({@link FLOORS}) also runs beside that floor every round,
 * as do the pieces of node:http `rateLimit` ({@link PIECES}), and keepcount's store for a
 * rate-limit package beside the package's own store ({@link RIVALS}); so does each pair asked for
 * with `--pair` (then only the setups named run).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { PARTS, SETUPS, type ServerUsage } from './http-server.js';
import { bareOf, CONNECTIONS, sideBySide, splitCores } from './load.js';

export interface HttpCase {
  setup: string;
  /** Median requests per second over rounds, side by side with its bare server (see {@link runHttp}). */
  rps: number;
  /**
   * Per round, requests per second over those of the bare server beside it in the same run (1 for
   * a bare server): ratios of setups are taken from these, round by round (report.ts).
   */
  roundRatios: number[];
  /**
   * Median server CPU time per request, microseconds (user + system, every thread of the server):
   * what the setup costs the server, whatever the load generator and the machine's neighbours do.
   */
  cpuUs: number;
  /** Per round, the bare server's CPU per request over this setup's, in the same run (1 for a bare server). */
  roundCpuRatios: number[];
  /** Median p99 latency in ms. */
  p99: number;
  /** Median server RSS growth over a run, bytes. */
  rssGrowth: number;
  /** Requests sent in one run (median), so also the distinct client keys the limiter saw. */
  requests: number;
  /** Non-2xx answers over all rounds: must be 0 (every limiter admits everything). */
  non2xx: number;
  /**
   * Median over its runs beside the bare server: how busy the servers' core was (both servers'
   * CPU time over the run's length) and how busy the load generator was (this process's CPU time
   * over the run's length), as fractions of one core. A generator busier than the servers' core
   * set the pace itself: throughput ratios are then pressed toward 1, and the CPU time per
   * request is the truer measure of what a setup costs the server (http-targets.ts `judged`).
   */
  serverCoreBusy: number;
  loadBusy: number;
  /**
   * For a setup of {@link PAIRS} (a limiter with a floor, the pieces, or keepcount's store with its rival): per
   * round, its requests/s over those of the other setup run beside it (and the other's CPU per
   * request over its own), in runs of their own.
   */
  beside?: { other: string; kind: 'floor' | 'pieces' | 'rival'; rps: number[]; cpu: number[] };
}

/**
 * The floor under each limiter that has one: a setup doing its framework's share of the same
 * visible work and counting nothing (one more Express layer; node:http's validating and sending
 * the two RateLimit fields). Issue 16's honest targets are the limiter over it. Each pair also
 * runs side by side: a ratio of two setups each taken beside its bare server a minute apart
 * carries both runs' noise, the pair run together only one.
 */
export const FLOORS: Readonly<Record<string, string>> = {
  'node-rateLimit': 'node-headers',
  'express-rateLimit': 'express-headers',
  'express-tokenBucket': 'express-noop',
  'express-upstreamLimit': 'express-noop',
};

/**
 * keepcount's store in each rate-limit package against the package's own store: issue 16 asks
 * whether swapping the store makes the server faster, which two runs each beside a bare server
 * tell only through both runs' noise (the Fastify pair read 1.01 and 0.99 in two full runs of the
 * same code, against a ceiling of 1.01). Run head to head, one run's noise is left.
 */
export const RIVALS: Readonly<Record<string, string>> = {
  'express-erl-keepcount': 'express-erl-memory',
  'fastify-frl-keepcount': 'fastify-frl-local',
};

/**
 * The pieces every limiter does per request (the key, one native call that takes it) over the
 * floor they share with node:http `rateLimit`: the yardstick of its honest target (http-targets.ts
 * `piecesTarget`). Run beside `node-headers` as `rateLimit` is, so that the two costs compared are
 * each one run's ratio: taken each alone through the bare server, the key and a call moved between
 * two runs by about what they cost (0.975 and 0.993 for the key, 0.964 and 0.983 for the call).
 */
export const PIECES: Readonly<Record<string, string>> = {
  'node-pieces': 'node-headers',
};

/** Every pair run side by side besides the bare-server runs: the floors, the pieces, the rivals. */
const PAIRS: Readonly<Record<string, string>> = { ...FLOORS, ...PIECES, ...RIVALS };

const pairKind = (setup: string): 'floor' | 'pieces' | 'rival' =>
  setup in FLOORS ? 'floor' : setup in PIECES ? 'pieces' : 'rival';

export interface HttpResults {
  /** Connections autocannon keeps open to each server. */
  connections: number;
  seconds: number;
  /** How long each server pair was driven before the measured run. */
  warmUpSeconds: number;
  rounds: number;
  cores: number;
  /** The CPUs the servers ran on, or `undefined` when they shared all of them with the load generator. */
  serverCpus: number[] | undefined;
  /** The CPUs the load generator ran on, or `undefined` when shared. */
  loadCpus: number[] | undefined;
  cases: HttpCase[];
  /** The pairs asked for by name (`--pair`), in the order asked. */
  askedPairs: AskedPair[];
}

/**
 * A pair asked for by name (`--pair setup:other`), to tell what one piece of a limiter costs over
 * another (the count over a one-call floor, say): run side by side every round as the pairs of
 * {@link PAIRS} are, recorded the same way as their `beside`.
 */
export interface AskedPair {
  setup: string;
  other: string;
  /** Per round, `setup`'s requests/s over `other`'s. */
  rps: number[];
  /** Per round, `other`'s CPU per request over `setup`'s. */
  cpu: number[];
}

interface Run {
  rps: number;
  cpuUs: number;
  p99: number;
  rssGrowth: number;
  requests: number;
  non2xx: number;
  /** Both servers' CPU time over the run's length (the same in each server's run). */
  serverCoreBusy: number;
  /** The load generator's CPU time over the run's length. */
  loadBusy: number;
}

/**
 * Runs `setups` at the same time, each in its own server process on `cpus` and driven by its own
 * autocannon, after a warm-up; resolves with each one's figures.
 */
async function runSideBySide(
  setups: string[],
  seconds: number,
  warmUpSeconds: number,
  cpus: number[] | undefined,
): Promise<Run[]> {
  return sideBySide(setups, cpus, warmUpSeconds, async (servers, driveAll) => {
    const before = await Promise.all(servers.map((server) => server.ask<ServerUsage>('usage')));
    const loadBefore = process.cpuUsage();
    const started = performance.now();
    const results = await driveAll(seconds);
    const elapsedUs = (performance.now() - started) * 1000;
    const load = process.cpuUsage(loadBefore);
    const after = await Promise.all(servers.map((server) => server.ask<ServerUsage>('usage')));
    const serversUs = after.reduce((sum, usage, i) => sum + usage.cpuUs - before[i]!.cpuUs, 0);
    return results.map((result, i) => ({
      rps: result.requests.average,
      cpuUs: (after[i]!.cpuUs - before[i]!.cpuUs) / result.requests.total,
      p99: result.latency.p99,
      rssGrowth: after[i]!.rss - before[i]!.rss,
      requests: result.requests.total,
      non2xx: result.non2xx + result.errors,
      serverCoreBusy: serversUs / elapsedUs,
      loadBusy: (load.user + load.system) / elapsedUs,
    }));
  });
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * Every setup of `only` (by default all), each run side by side with its framework's bare server:
 * both servers on the same core, each driven by its own autocannon at the same time, so that a
 * slower spell of the machine (on a shared VM, rounds of one setup run alone spread ±20%) slows
 * both alike and the ratio of the two, taken within the run, is left. With the core shared
 * equally, the setup's throughput over the bare server's is the bare server's cost per request
 * over the setup's; both that ratio and the ratio of their CPU times per request are recorded.
 */
export async function runHttp(
  quick: boolean,
  only: string[] = [],
  asked: ReadonlyArray<readonly [string, string]> = [],
): Promise<HttpResults> {
  // Five short rounds rather than two long ones: the load on a shared VM drifts over minutes, and
  // the median of the ratios drops the rounds a neighbour's burst spoiled.
  const seconds = quick ? 1 : 4;
  const rounds = quick ? 1 : 5;
  // Long enough for V8 to finish compiling on this slow VM: after a 1 s warm-up (~1,000 Express
  // requests) the measured run still paid for compiling the limiter's code, and charged it to the
  // limiter: the same hour, a constant-key `Limiter.check` read 0.943 after 1 s and 0.979 after
  // 10 s (a do-nothing middleware 0.975 both times), `tokenBucket` 0.892 and 0.947. Instruction
  // counts (callgrind, 2,000 requests after 3,000) gave the check +0.04 % over the bare server.
  const warmUpSeconds = quick ? 1 : 10;
  const chosen = only.length > 0 || asked.length > 0 ? [...only, ...asked.flat()] : Object.keys(SETUPS);
  const names = [...new Set([...chosen.map(bareOf), ...chosen])];
  const known = [...Object.keys(SETUPS), ...Object.keys(PARTS)];
  const unknown = names.filter((name) => !known.includes(name));
  if (unknown.length > 0) throw new Error(`unknown setups ${unknown.join(', ')}; known: ${known.join(', ')}`);
  const cpus = splitCores();
  const limited = names.filter((name) => name !== bareOf(name));
  const runs = new Map<string, Run[]>(names.map((n) => [n, []]));
  const ratios = new Map<string, { rps: number[]; cpu: number[] }>(names.map((n) => [n, { rps: [], cpu: [] }]));
  const pairs = Object.entries(PAIRS).filter(([setup, other]) => names.includes(setup) && names.includes(other));
  const beside = new Map(
    pairs.map(([setup, other]) => [setup, { other, kind: pairKind(setup), rps: [] as number[], cpu: [] as number[] }]),
  );
  const askedPairs = asked.map(([setup, other]) => ({ setup, other, rps: [] as number[], cpu: [] as number[] }));
  for (let round = 0; round < rounds; round++) {
    // Rotate the order each round so no setup always runs first or last.
    const order = limited.map((_, i) => limited[(i + round) % limited.length]!);
    for (const setup of order) {
      console.log(`http ${setup} beside ${bareOf(setup)} (round ${round + 1}/${rounds})`);
      const [bare, ours] = (await runSideBySide([bareOf(setup), setup], seconds, warmUpSeconds, cpus.server)) as [
        Run,
        Run,
      ];
      runs.get(setup)!.push(ours);
      runs.get(bareOf(setup))!.push(bare);
      ratios.get(setup)!.rps.push(ours.rps / bare.rps);
      ratios.get(setup)!.cpu.push(bare.cpuUs / ours.cpuUs);
    }
    const both = [
      ...pairs.map(([setup, other]) => ({ setup, other, into: beside.get(setup)! })),
      ...askedPairs.map((into) => ({ ...into, into })),
    ];
    for (const { setup, other, into } of both) {
      console.log(`http ${setup} beside ${other} (round ${round + 1}/${rounds})`);
      const [them, ours] = (await runSideBySide([other, setup], seconds, warmUpSeconds, cpus.server)) as [Run, Run];
      into.rps.push(ours.rps / them.rps);
      into.cpu.push(them.cpuUs / ours.cpuUs);
    }
    for (const bare of names.filter((name) => name === bareOf(name))) {
      ratios.get(bare)!.rps.push(1);
      ratios.get(bare)!.cpu.push(1);
    }
  }
  return {
    connections: CONNECTIONS,
    seconds,
    warmUpSeconds,
    rounds,
    cores: cpus.cores,
    serverCpus: cpus.server,
    loadCpus: cpus.load,
    cases: names.map((setup) => {
      const r = runs.get(setup)!;
      return {
        setup,
        rps: median(r.map((x) => x.rps)),
        roundRatios: ratios.get(setup)!.rps,
        cpuUs: median(r.map((x) => x.cpuUs)),
        roundCpuRatios: ratios.get(setup)!.cpu,
        p99: median(r.map((x) => x.p99)),
        rssGrowth: median(r.map((x) => x.rssGrowth)),
        requests: median(r.map((x) => x.requests)),
        non2xx: r.reduce((sum, x) => sum + x.non2xx, 0),
        serverCoreBusy: median(r.map((x) => x.serverCoreBusy)),
        loadBusy: median(r.map((x) => x.loadBusy)),
        beside: beside.get(setup),
      };
    }),
    askedPairs,
  };
}

if (require.main === module) {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      out: { type: 'string' },
      setup: { type: 'string', multiple: true },
      pair: { type: 'string', multiple: true },
    },
  });
  const pairs = (values.pair ?? []).map((pair) => {
    const [setup, other, ...rest] = pair.split(':');
    if (setup === undefined || other === undefined || setup === '' || other === '' || rest.length > 0) {
      throw new Error(`--pair takes setup:other, got ${JSON.stringify(pair)}`);
    }
    return [setup, other] as const;
  });
  runHttp(values.quick, values.setup, pairs)
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
