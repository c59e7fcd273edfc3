/**
 * `npm run demo -- [--short] [--cluster N | --redis]`: a protected proxy on 127.0.0.1 under a
 * bounded load from two clients, a polite one and a flooding one, then a table of what each got.
 * With `--cluster N` the proxy runs as N `node:cluster` workers sharing their limits (native
 * backend); with `--redis`, as 3 processes on 3 ports, as machines behind a load balancer, their
 * rate limit synced through a `redis-server` the demo starts (it must be installed).
 */
import autocannon from 'autocannon';
import cluster from 'node:cluster';
import { parseArgs } from 'node:util';
import { backend } from '../lib/index.js';
import type { RateLimitMiddleware } from '../lib/http/index.js';
import { requireRedisServer, startRedis } from '../tools/redis-server.js';
import { runWorker, startWorkers, WorkerStartError } from './cluster.js';
import { DEMO_SYNC_MS } from './redis.js';
import { listen, protection, proxy, upstream, upstreamShape } from './servers.js';

/** Most `--cluster` workers (the shared in-flight segment is sized for them and this process). */
const MAX_WORKERS = 64;
const USAGE =
  `usage: npm run demo -- [--short] [--cluster N | --redis]\n` +
  `  --short      a 4 s load instead of 15 s\n` +
  `  --cluster N  the proxy as N node:cluster workers (1 to ${MAX_WORKERS}) sharing their limits\n` +
  `  --redis      the proxy as 3 processes on 3 ports, their rate limit synced through redis-server\n` +
  `  -h, --help   this help`;

/** The command line, checked: the usage and exit code 0 for `--help`, exit code 2 for anything else. */
function parseCommandLine(): { short: boolean; redis: boolean; cluster: number | undefined } {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        short: { type: 'boolean', default: false },
        cluster: { type: 'string' },
        redis: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (error) {
    return usage((error as Error).message);
  }
  if (values.help) {
    console.log(USAGE);
    process.exit(0);
  }
  const cluster = values.cluster === undefined ? undefined : Number(values.cluster);
  if (cluster !== undefined && !(Number.isInteger(cluster) && cluster >= 1 && cluster <= MAX_WORKERS)) {
    return usage(`--cluster takes a number of workers from 1 to ${MAX_WORKERS}, not "${values.cluster}"`);
  }
  if (cluster !== undefined && values.redis) return usage('--cluster and --redis are two different demos');
  return { short: values.short, redis: values.redis, cluster };
}

function usage(problem: string): never {
  console.error(`${problem}\n${USAGE}`);
  process.exit(2);
}

const args = parseCommandLine();
const short = args.short;
const redis = args.redis;
/** Proxy processes: 0 runs the proxy in this process. */
const workers = redis ? 3 : (args.cluster ?? 0);
const durationS = short ? 4 : 15;
/** The upstream browns out during the middle third of the run. */
const brownout = { fromMs: (durationS * 1000) / 3, toMs: (durationS * 2000) / 3 };

/**
 * autocannon paces a rate per second: at each one-second tick a client sends its quota back to
 * back. The polite client starts half a second after the flood so its bursts do not land on the
 * flood's; otherwise it would often meet the upstream's in-flight cap full of the flood's
 * admitted requests (a 503 that says more about the load generator than about the protection).
 */
const clients = [
  { name: 'polite', connections: 2, overallRate: 10, delayMs: 500 },
  { name: 'flood', connections: 16, overallRate: 500, delayMs: 0 },
] as const;

interface Row {
  name: string;
  requests: number;
  byStatus: Record<string, number>;
  errors: number;
  p50: number;
  p99: number;
}

type Client = { name: string; connections: number; overallRate: number; delayMs: number };

/**
 * `client`'s connections and rate split over `ports` as evenly as whole numbers allow, the
 * remainders to the first ports, so the parts add up to the client's figures. A port gets a part
 * only if it can have a connection and 1 req/s (autocannon reads a rate of 0 as no limit): with
 * fewer connections than ports, the last ports get none of this client.
 */
function split(ports: number[], client: Client): { port: number; connections: number; overallRate: number }[] {
  const parts = Math.min(ports.length, client.connections, client.overallRate);
  const share = (total: number, i: number) => Math.floor(total / parts) + (i < total % parts ? 1 : 0);
  return ports.slice(0, parts).map((port, i) => ({
    port,
    connections: share(client.connections, i),
    overallRate: share(client.overallRate, i),
  }));
}

/**
 * `client`'s load split over `ports` (one autocannon per port, see {@link split}), merged into one
 * row; the latency columns are then the worst port's. The parts start a `1 / ports` of a second
 * apart: as traffic behind a load balancer, the machines' bursts are not in lockstep (bursts that
 * hit every machine within one sync period are what the overshoot bound is about).
 */
async function load(ports: number[], client: Client): Promise<Row> {
  const rows = await Promise.all(
    split(ports, client).map((part, i) =>
      loadOne(part.port, { ...client, ...part, delayMs: client.delayMs + (i * 1000) / ports.length }),
    ),
  );
  if (rows.length === 1) return rows[0]!;
  const byStatus: Record<string, number> = {};
  for (const r of rows)
    for (const [status, n] of Object.entries(r.byStatus)) byStatus[status] = (byStatus[status] ?? 0) + n;
  return {
    name: client.name,
    requests: rows.reduce((a, r) => a + r.requests, 0),
    byStatus,
    errors: rows.reduce((a, r) => a + r.errors, 0),
    p50: Math.max(...rows.map((r) => r.p50)),
    p99: Math.max(...rows.map((r) => r.p99)),
  };
}

async function loadOne(port: number, client: Client): Promise<Row> {
  await new Promise((resolve) => setTimeout(resolve, client.delayMs));
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url: `http://127.0.0.1:${port}/`,
        connections: client.connections,
        overallRate: client.overallRate,
        duration: durationS,
        headers: { 'x-client': client.name },
        timeout: 5,
      },
      (error, result) => {
        if (error) return reject(error);
        const byStatus: Record<string, number> = {};
        for (const [status, stats] of Object.entries(result.statusCodeStats ?? {})) byStatus[status] = stats.count ?? 0;
        resolve({
          name: client.name,
          requests: Object.values(byStatus).reduce((a, b) => a + b, 0),
          byStatus,
          errors: result.errors + result.timeouts,
          p50: result.latency.p50,
          p99: result.latency.p99,
        });
      },
    );
  });
}

/** The parts of `client`'s load over `ports`, e.g. `1+1 connections at 5+5 req/s`. */
function splitText(ports: number[], client: Client): string {
  const parts = split(ports, client);
  return (
    `${parts.map((p) => p.connections).join('+')} connections at ` +
    `${parts.map((p) => p.overallRate).join('+')} req/s`
  );
}

function table(rows: Row[]): string {
  const head = ['client', 'requests', '200', '429', '503', '504', 'other', 'p50/ms', 'p99/ms'];
  const body = rows.map((r) => {
    const known = ['200', '429', '503', '504'].map((s) => r.byStatus[s] ?? 0);
    const other = r.requests - known.reduce((a, b) => a + b, 0) + r.errors;
    return [r.name, r.requests, ...known, other, r.p50, r.p99].map(String);
  });
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((row) => row[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(head), line(widths.map((w) => '-'.repeat(w))), ...body.map(line)].join('\n');
}

/**
 * The rate limit's top talkers over its last two windows: every client that reached the
 * heavy-hitter threshold is counted exactly from then on, so in each window it was tracked in its
 * bounds are at most threshold − 1 apart (in a window it was not, its sketch count is added).
 */
function talkers(limit: RateLimitMiddleware): string {
  const lines = limit.topTalkers(3, 'both').map(({ key, lower, upper }) => {
    const count = lower === upper ? `${lower}` : `${lower} to ${upper}`;
    return `  ${String(key).padEnd(8)} ${count} requests`;
  });
  return [
    `\ntop talkers of the last two ${protection.windowMs} ms windows (rate limit's exact table; exact to within the threshold per window):`,
    ...(lines.length > 0 ? lines : ['  (none reached the threshold)']),
  ].join('\n');
}

async function main(): Promise<void> {
  const started = performance.now();
  const elapsed = () => performance.now() - started;
  const store = redis ? await startRedis() : undefined;
  const origin = upstream(() => elapsed() >= brownout.fromMs && elapsed() < brownout.toMs);
  const upstreamPort = await listen(origin);
  const front = workers > 0 ? undefined : proxy(upstreamPort);
  const pool =
    workers > 0
      ? await startWorkers(
          workers,
          upstreamPort,
          store === undefined ? { kind: 'shared' } : { kind: 'redis', port: store.port },
        ).catch(async (error: unknown) => {
          // E.g. ERR_KEEPCOUNT_UNSUPPORTED on the fallback: nothing keeps the process up then.
          origin.close();
          await store?.stop();
          throw error;
        })
      : undefined;
  const ports = pool?.ports ?? [await listen(front!.server)];

  console.log(
    `keepcount demo: backend ${backend}${backend === 'native' ? ' (Rust core)' : ' (TypeScript; build the Rust core with npm run build:debug)'}`,
  );
  console.log(
    `proxy 127.0.0.1:${ports.join(', ')}: ${protection.limit} requests per ${protection.windowMs} ms per client (rate limit, 429), ` +
      `${protection.maxInflight} calls in flight to the upstream (503), ${protection.deadlineMs} ms upstream deadline (504)` +
      (store !== undefined
        ? `\n${workers} proxy processes, one per port as machines behind a load balancer, the rate limit one ` +
          `SyncedWindowQuota synced every ${DEMO_SYNC_MS} ms through redis-server on 127.0.0.1:${store.port} ` +
          `(started for the demo in a temporary directory); the in-flight cap is per process`
        : workers > 0
          ? `\n${workers} node:cluster workers on that port, the rate limit and the in-flight cap in shared memory ` +
            `(/dev/shm) so they hold for all of them together`
          : ''),
  );
  console.log(
    `upstream: ${upstreamShape.fastMs} ms, but every ${upstreamShape.slowEvery}rd call takes ${upstreamShape.slowMs} ms ` +
      `from ${(brownout.fromMs / 1000).toFixed(1)} s to ${(brownout.toMs / 1000).toFixed(1)} s`,
  );
  console.log(
    `load (autocannon, ${durationS} s): ` +
      clients.map((c) => `${c.name} ${c.connections} connections at up to ${c.overallRate} req/s`).join(', ') +
      '; clients are told apart by an x-client header (all share 127.0.0.1)' +
      (ports.length > 1
        ? `\neach client's load is split over the ${ports.length} ports, the parts ${(1000 / ports.length).toFixed(0)} ms ` +
          `apart (${clients.map((c) => `${c.name} ${splitText(ports, c)}`).join('; ')}); p50/p99 are the worst port's`
        : '') +
      '\n',
  );

  // The top talkers as the load ends: read when the first client's load is over, while the others
  // still send. Read after the last one's (which can wait out a slow upstream call), the windows
  // may have turned past the flood, and a 1 s window keeps little of it.
  let topTalkers: string | undefined;
  const rows = await Promise.all(
    clients.map(async (c) => {
      const row = await load(ports, c);
      if (front !== undefined) topTalkers ??= talkers(front.limit);
      return row;
    }),
  );
  console.log(table(rows));
  if (front !== undefined) console.log(topTalkers);
  else {
    // Each worker on its own counters would have admitted its limit per window: N times over.
    // Windows follow a clock, not the load, so a load of d ms (its parts staggered) overlaps up to
    // ⌈d / windowMs⌉ + 1 of them.
    const spanMs = durationS * 1000 + ((ports.length - 1) * 1000) / ports.length;
    const windows = Math.ceil(spanMs / protection.windowMs) + 1;
    const flood = rows.find((r) => r.name === 'flood')!;
    const admitted = ['200', '503', '504'].reduce((a, s) => a + (flood.byStatus[s] ?? 0), 0);
    console.log(
      `\nper client, the ${store === undefined ? 'shared' : 'global'} limit admits at most about ${protection.limit} per ` +
        `${protection.windowMs} ms window (${protection.limit * windows} in this run); per-process limits would have ` +
        `admitted up to ${protection.limit * workers} per window (${protection.limit * workers * windows} in this run)` +
        `\nflood admitted past the rate limit (200 + 503 + 504): ${admitted}`,
    );
  }
  console.log(
    [
      '',
      "429: over the client's quota, refused with RateLimit and Retry-After headers before any upstream work",
      '503: the upstream already had its cap of calls in flight (released on finish, error or client abort)',
      '504: the upstream call missed its deadline (the slow calls of the brownout)',
      'other: other statuses, connection errors and client timeouts',
    ].join('\n'),
  );

  // Workers may still be finishing calls the load generator gave up on: give them a second.
  let inflight = (await pool?.inflight()) ?? front!.inflight.inflight.get('origin');
  const settleBy = performance.now() + 1000;
  while (pool !== undefined && inflight !== 0 && performance.now() < settleBy) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    inflight = await pool.inflight();
  }
  await pool?.stop();
  await store?.stop();
  for (const server of front === undefined ? [origin] : [front.server, origin]) {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
  // Responses closed by closeAllConnections() emit 'close' on the next turns of the event loop.
  await new Promise((resolve) => setTimeout(resolve, 10));
  const after = pool === undefined ? front!.inflight.inflight.get('origin') : inflight;
  console.log(`\nin flight after the run: ${after}; done in ${(elapsed() / 1000).toFixed(1)} s`);
}

/**
 * Reports `error` and exits 1. Expected failures (a keepcount or system error code such as
 * ERR_KEEPCOUNT_UNSUPPORTED on the fallback or EACCES/ENOSPC on the temporary directory, a worker
 * that failed to start, redis-server missing) print their message only; others their stack too.
 * Exiting also stops what is left: workers leave when their IPC channel closes, and redis-server
 * and the shared segments are removed by this process's exit handlers.
 */
function fail(error: unknown, expected = false): never {
  const code = (error as { code?: unknown } | undefined)?.code;
  if (error instanceof Error && (expected || typeof code === 'string' || error instanceof WorkerStartError)) {
    console.error(`keepcount demo: ${error.message}${typeof code === 'string' ? ` (${code})` : ''}`);
  } else {
    console.error('keepcount demo failed:', error);
  }
  process.exit(1);
}

if (cluster.isWorker) runWorker();
else {
  try {
    if (redis) requireRedisServer();
  } catch (error) {
    // redis-server missing: the message says what to install.
    fail(error, true);
  }
  main().catch((error: unknown) => fail(error));
}
