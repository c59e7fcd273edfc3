/**
 * One Express hello-world of the request-path breakdown (`request-path.ts`), run in its own
 * process: `node --import=tsx benchmark/request-path-server.ts <step>`. The step under test is the
 * only middleware, wrapped in a timer; the process prints `{"port": N}` once listening and answers
 * `'timing'` messages on the IPC channel with the time spent in the step, in the rest of the
 * synchronous chain (Express's router, the handler, `res.send`) and the time the event loop was
 * busy (all of the main thread's work: HTTP parsing, socket I/O, the handler) since the last
 * `'reset'`.
 *
 * Why a timer inside a loaded server rather than a microbenchmark: between two requests Express
 * runs ~100 µs of its own code, which evicts the limiter's code and data from the caches, so a
 * step that costs 100 ns in a loop costs microseconds here. This is the cost a request pays.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import express from 'express';
import { keepcount, keepcountHttp } from './package.js';

const { Limiter } = keepcount;
const { WindowQuota, clientIp, ipKey, rateLimit, tokenBucket, upstreamLimit } = keepcountHttp;

/** Far above what one run can send: every request is admitted. */
const LIMIT = 1_000_000_000;
const WINDOW_MS = 60_000;

type Step = (req: IncomingMessage, res: ServerResponse, next: () => void) => void;

/** Keeps a result alive so that the step is not optimised away. */
let sink: unknown;

const quota = new WindowQuota({ limit: LIMIT, windowMs: WINDOW_MS });
const openLimiter = new Limiter({ bestEffort: { requests: { perSecond: LIMIT, burst: LIMIT } } });

/** The steps by name, each what one part of a limiter does per request (see `request-path.ts`). */
export const STEPS: Record<string, Step> = {
  // The timer around an empty step: subtract it from the others.
  empty: (_req, _res, next) => next(),
  // What any limiter that sends the draft's headers does at least: read the peer, set two fields.
  'peer + 2 headers': (req, res, next) => {
    sink = req.socket.remoteAddress;
    res.setHeader('RateLimit-Policy', '"default";q=1000000000;w=60');
    res.setHeader('RateLimit', '"default";r=999999999;t=60');
    next();
  },
  // keepcount's default key: the client behind one trusted proxy, by its IPv6 prefix.
  clientIp: (req, _res, next) => {
    sink = ipKey(clientIp(req, 1));
    next();
  },
  // Counting a fresh key in rateLimit's default quota (heavy hitters over a 4 × 51,072 sketch).
  'WindowQuota.consume': (req, _res, next) => {
    sink = quota.consume(req.headers['x-forwarded-for'] as string);
    next();
  },
  rateLimit: rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1 }),
  // The same without its two header fields: how much of its time sending them takes.
  'rateLimit, headers: false': rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1, headers: false }),
  tokenBucket: tokenBucket({ limiter: openLimiter, trustProxy: 1 }),
  upstreamLimit: upstreamLimit({ max: LIMIT, upstream: () => 'origin' }),
};

async function main(): Promise<void> {
  const name = process.argv[2] ?? '';
  const step = STEPS[name];
  if (step === undefined) throw new Error(`unknown step ${JSON.stringify(name)}; one of ${Object.keys(STEPS)}`);
  let stepNs = 0n;
  let restNs = 0n;
  let calls = 0;
  let loop = performance.eventLoopUtilization();
  const ignore = (): void => {};
  const app = express();
  app.set('trust proxy', 1);
  // Express builds `req.headers` lazily on first read; read it before the timer so that the first
  // step to touch a header is not charged for what the handler would do anyway.
  app.use((req, _res, next) => {
    sink = req.headers;
    next();
  });
  app.use((req, res, next) => {
    const start = process.hrtime.bigint();
    step(req, res, ignore);
    const middle = process.hrtime.bigint();
    next();
    restNs += process.hrtime.bigint() - middle;
    stepNs += middle - start;
    calls++;
  });
  app.get('/', (_req, res) => {
    res.send('hello world\n');
  });
  const server = createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.on('message', (message) => {
    if (message === 'reset') {
      [stepNs, restNs, calls, loop] = [0n, 0n, 0, performance.eventLoopUtilization()];
      process.send!('ok');
    } else if (message === 'timing') {
      const { active } = performance.eventLoopUtilization(loop);
      process.send!({
        stepNs: Number(stepNs),
        restNs: Number(restNs),
        busyUs: active * 1000,
        calls,
        sink: typeof sink,
      });
    }
  });
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
