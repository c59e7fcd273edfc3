/**
 * Where a limiter's time goes on Express's request path:
 * `node --import=tsx benchmark/request-path.ts [--rounds 5] [--seconds 4] [--warm-up 10]` (`npm run bench:request-path`).
 *
 * The end-to-end bench (`http.ts`) says how much throughput a limiter costs, but on a shared
 * 2-core machine its ratios move by ±5% from run to run, too much to tell the parts of a 5% cost
 * apart. This times each part inside a loaded server instead: each step of `request-path-server.ts`
 * is the only middleware of an Express hello-world in its own process, driven by autocannon as in
 * `http.ts` (32 connections, a fresh `X-Forwarded-For` address per request, a 10 s warm-up), with a
 * `process.hrtime` timer around the step. Reported per step: the median over interleaved rounds of
 * its mean microseconds per request (the empty step's, the timer itself, subtracted), and that as
 * a share of the time the server's event loop was busy per request in the same run (parsing and
 * I/O included): when the server's main thread is the bottleneck, as Express's is here, that share
 * is the throughput the step costs.
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { addresses, drive, splitCores, startServer } from './load.js';
import { STEPS } from './request-path-server.js';

interface Timing {
  stepNs: number;
  restNs: number;
  busyUs: number;
  calls: number;
}

async function timeStep(
  step: string,
  seconds: number,
  warmUpSeconds: number,
  cpus: number[] | undefined,
): Promise<Timing> {
  const server = await startServer(join(__dirname, 'request-path-server.ts'), step, cpus);
  try {
    const next = addresses();
    await drive(server.port, warmUpSeconds, next);
    await server.ask('reset');
    const result = await drive(server.port, seconds, next);
    const timing = await server.ask<Timing>('timing');
    if (result.non2xx + result.errors > 0) throw new Error(`step ${step}: ${result.non2xx} non-2xx answers`);
    return timing;
  } finally {
    server.stop();
  }
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      rounds: { type: 'string', default: '5' },
      seconds: { type: 'string', default: '4' },
      // As in http.ts: after 1 s V8 is still compiling on this VM, and a step brings more code to
      // compile than the empty one, so a short warm-up charges that one-off cost to the step.
      'warm-up': { type: 'string', default: '10' },
    },
  });
  const rounds = Number(values.rounds);
  const seconds = Number(values.seconds);
  const warmUpSeconds = Number(values['warm-up']);
  if (!(Number.isInteger(rounds) && rounds >= 1 && seconds > 0 && warmUpSeconds >= 0)) {
    console.error(
      'usage: node --import=tsx benchmark/request-path.ts [--rounds N >= 1] [--seconds S > 0] [--warm-up S >= 0]',
    );
    process.exit(2);
  }
  const steps = Object.keys(STEPS);
  const cpus = splitCores();
  const samples = new Map<string, { step: number[]; busy: number[] }>(steps.map((s) => [s, { step: [], busy: [] }]));
  for (let round = 0; round < rounds; round++) {
    const order = steps.map((_, i) => steps[(i + round) % steps.length]!);
    for (const step of order) {
      const t = await timeStep(step, seconds, warmUpSeconds, cpus.server);
      samples.get(step)!.step.push(t.stepNs / t.calls / 1000);
      samples.get(step)!.busy.push(t.busyUs / t.calls);
    }
  }
  const timer = median(samples.get('empty')!.step);
  console.log(
    `Express ${(createRequire(__filename)('express/package.json') as { version: string }).version}, node ${process.version}, ${cpus.cores} cores, ` +
      (cpus.server === undefined
        ? 'shared by server and load generator; '
        : `the server on CPU ${cpus.server.join(',')}, the load generator on CPU ${cpus.load!.join(',')}; `) +
      `${rounds} rounds of ${seconds} s after ${warmUpSeconds} s of warm-up, medians; the timer's own ${timer.toFixed(2)} µs subtracted.\n`,
  );
  console.log("| step | µs per request | share of the server's main thread per request | rounds (µs) |");
  console.log('|---|---:|---:|---|');
  for (const step of steps.filter((s) => s !== 'empty')) {
    const { step: own, busy } = samples.get(step)!;
    const us = median(own) - timer;
    const share = (100 * us) / median(busy);
    const all = own.map((x) => (x - timer).toFixed(1)).join(' / ');
    console.log(`| ${step} | ${us.toFixed(1)} | ${share.toFixed(1)}% | ${all} |`);
  }
  const bare = median(samples.get('empty')!.busy);
  console.log(`\nThe server's main thread per request with the empty step: ${bare.toFixed(0)} µs busy (median).`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
