/**
 * Where a setup's server spends its time per request: `node --import=tsx benchmark/profile.ts
 * <setup> [<setup> …] [--seconds S] [--warm-up S] [--top N]` (setups and parts of `http-server.ts`).
 *
 * The servers run side by side as in the end-to-end bench, each in its own process, all on one
 * core, each driven by its own autocannon (32 connections, a fresh `X-Forwarded-For` address per
 * request); after the warm-up, V8's sampling profiler (every 25 µs) runs inside every server while
 * they are driven. Each function's self time is
 * printed as microseconds per request: its share of the samples in which the server was busy times
 * the server's CPU time per request (all its threads, so the figures are a little high). With more
 * than one setup every column is compared with the first: `node-headers node-rateLimit` lists what
 * `rateLimit` adds over the floor of its two header fields, function by function. Rows without a
 * file are native: V8 files the time in every N-API function under one of their names (on the
 * native backend `limiterCheckKey :0`), so read that row as all the calls into the addon.
 */
import { parseArgs } from 'node:util';
import type { ProfileRow, ServerUsage } from './http-server.js';
import { sideBySide, splitCores } from './load.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    seconds: { type: 'string', default: '10' },
    'warm-up': { type: 'string', default: '10' },
    top: { type: 'string', default: '30' },
  },
});
if (positionals.length === 0)
  throw new Error('usage: profile.ts <setup> [<setup> ...] [--seconds S] [--warm-up S] [--top N]');
const seconds = Number(values.seconds);
const warmUpSeconds = Number(values['warm-up']);
const top = Number(values.top);

/** One setup's profile: microseconds per request by function, and the CPU time per request. */
interface Profiled {
  setup: string;
  cpuUs: number;
  requestsPerSecond: number;
  us: Map<string, number>;
}

/**
 * Profiles `setups` side by side, as the end-to-end bench runs them: every server on the same
 * core, each driven by its own autocannon at the same time, so that the machine's drift (on a
 * shared VM, ±20 % between runs minutes apart) weighs on all of them alike.
 */
async function profileSideBySide(setups: string[], cpus: number[] | undefined): Promise<Profiled[]> {
  return sideBySide(setups, cpus, warmUpSeconds, async (servers, driveAll) => {
    const before = await Promise.all(servers.map((server) => server.ask<ServerUsage>('usage')));
    await Promise.all(servers.map((server) => server.ask('profile-start')));
    const results = await driveAll(seconds);
    const rows = await Promise.all(servers.map((server) => server.ask<ProfileRow[]>('profile-stop')));
    const after = await Promise.all(servers.map((server) => server.ask<ServerUsage>('usage')));
    return setups.map((setup, i) => {
      const cpuUs = (after[i]!.cpuUs - before[i]!.cpuUs) / results[i]!.requests.total;
      return {
        setup,
        cpuUs,
        requestsPerSecond: results[i]!.requests.average,
        us: new Map(rows[i]!.map((row) => [row.where, row.share * cpuUs])),
      };
    });
  });
}

async function main(): Promise<void> {
  const cpus = splitCores();
  console.error(`profiling ${positionals.join(', ')} side by side (${warmUpSeconds} s warm-up, ${seconds} s profiled)`);
  const profiles = await profileSideBySide(positionals, cpus.server);
  const [first] = profiles as [Profiled];
  // The rows worth reading: the largest in any setup, and with several setups the largest changes.
  const names = new Set<string>();
  for (const p of profiles) [...p.us].slice(0, top).forEach(([name]) => names.add(name));
  const delta = (name: string): number =>
    Math.max(...profiles.map((p) => Math.abs((p.us.get(name) ?? 0) - (first.us.get(name) ?? 0))));
  if (profiles.length > 1) {
    [...new Set([...profiles.flatMap((p) => [...p.us.keys()])])]
      .sort((a, b) => delta(b) - delta(a))
      .slice(0, top)
      .forEach((name) => names.add(name));
  }
  const fmt = (x: number): string => x.toFixed(2).padStart(8);
  const header = profiles.map((p) => p.setup.slice(0, 20).padStart(22)).join('');
  console.log(`server CPU µs per request${' '.repeat(12)}${profiles.map((p) => fmt(p.cpuUs).padStart(22)).join('')}`);
  console.log(
    `requests per second${' '.repeat(19)}${profiles.map((p) => p.requestsPerSecond.toFixed(0).padStart(22)).join('')}`,
  );
  console.log(`\nself time, µs per request${' '.repeat(13)}${header}`);
  const rows = [...names].sort(
    (a, b) => Math.max(...profiles.map((p) => p.us.get(b) ?? 0)) - Math.max(...profiles.map((p) => p.us.get(a) ?? 0)),
  );
  for (const name of rows) {
    const cells = profiles.map((p, i) => {
      const us = p.us.get(name) ?? 0;
      const change =
        i === 0
          ? ''
          : ` ${(us - (first.us.get(name) ?? 0) >= 0 ? '+' : '') + (us - (first.us.get(name) ?? 0)).toFixed(2)}`;
      return `${fmt(us)}${change.padStart(14)}`;
    });
    console.log(`${name.slice(0, 36).padEnd(38)}${cells.join('')}`);
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
