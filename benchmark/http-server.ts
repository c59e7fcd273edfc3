/**
 * One hello-world server of the end-to-end HTTP benchmark (`http.ts`), run in its own process:
 * `node --import=tsx benchmark/http-server.ts <setup>`. It prints `{"port": N}` once listening and
 * answers `'usage'` messages on the IPC channel with its resident set size and the CPU time it has
 * used, so the load generator can read the server's memory growth and CPU time per request without
 * a request going through the limiter.
 *
 * Every limiter is configured to admit everything (limits far above the load), so the figures are
 * the cost of counting and deciding, with RateLimit headers on; clients are told apart by
 * `X-Forwarded-For` behind one trusted proxy hop, as a service behind a load balancer would be.
 */
import { createServer, type IncomingMessage, type RequestListener, type ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { rateLimit as expressRateLimit } from 'express-rate-limit';
import fastifyRateLimit from '@fastify/rate-limit';
import Fastify from 'fastify';
import type { Limiter as LimiterType } from '../lib/index.js';
import type { Middleware } from '../lib/http/index.js';
import { keepcount, keepcountHttp } from './package.js';
import { unnamed } from './unnamed.js';

const { Estimator, Limiter } = keepcount;
const { KeepcountStore, WindowQuota, clientIp, ipKey, keepcountFastifyStore, rateLimit, tokenBucket, upstreamLimit } =
  keepcountHttp;

/** Far above what one run can send: every request is admitted. */
const LIMIT = 1_000_000_000;
const WINDOW_MS = 60_000;
const HELLO = 'hello world\n';

type Setup = () => Promise<number>;

/** What the server answers a `'usage'` message with. */
export interface ServerUsage {
  /** Resident set size, bytes. */
  rss: number;
  /** CPU time the process has used (user + system, all its threads), microseconds. */
  cpuUs: number;
  /** What the parts' results were, so that they are not optimised away. */
  sink: string;
}

const listen = (server: ReturnType<typeof createServer>): Promise<number> =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port)));

/** A node:http server running `chain` before the hello-world handler. */
function nodeServer(chain: Middleware[]): Setup {
  const hello = (_req: IncomingMessage, res: ServerResponse): void => {
    res.end(HELLO);
  };
  const handler: RequestListener = (req, res) => {
    let i = 0;
    // Made per request: not wrapped by tsx's keepNames (unnamed.ts).
    const next = unnamed((error?: unknown): void => {
      if (error !== undefined) {
        res.statusCode = 500;
        res.end();
      } else if (i < chain.length) {
        chain[i++]!(req, res, next);
      } else {
        hello(req, res);
      }
    });
    next();
  };
  return () => listen(createServer(handler));
}

function expressServer(use: express.RequestHandler[]): Setup {
  return () => {
    const app = express();
    app.set('trust proxy', 1);
    for (const middleware of use) app.use(middleware);
    app.get('/', (_req, res) => {
      res.send(HELLO);
    });
    return listen(createServer(app));
  };
}

function fastifyServer(register: (app: ReturnType<typeof Fastify>) => Promise<void>): Setup {
  return async () => {
    const app = Fastify({ trustProxy: true });
    await register(app);
    app.get('/', async () => HELLO);
    await app.listen({ port: 0, host: '127.0.0.1' });
    return (app.server.address() as AddressInfo).port;
  };
}

const openLimiter = (): LimiterType => new Limiter({ bestEffort: { requests: { perSecond: LIMIT, burst: LIMIT } } });

/** The header fields `rateLimit` sends in these setups for a client's first request. */
const RATE_LIMIT_POLICY = `"default";q=${LIMIT};w=${WINDOW_MS / 1000}`;
const RATE_LIMIT = `"default";r=${LIMIT - 1};t=${WINDOW_MS / 1000}`;

/** Sends those two fields, as a middleware, without counting anything. */
const sendRateLimitFields = (_req: IncomingMessage, res: ServerResponse, next: () => void): void => {
  res.setHeader('RateLimit-Policy', RATE_LIMIT_POLICY);
  res.setHeader('RateLimit', RATE_LIMIT);
  next();
};

/** Keep results alive so that a floor or a part is not optimised away. */
let sink: unknown;
let keySink: unknown;

/** The limiter of the parts. */
const partLimiter = openLimiter();

/**
 * The floor of the per-call targets (benchmark/suites.ts): one native call that takes a key,
 * hashes it and reads one counter, what any design counting per key pays at least.
 */
const floorSketch = new Estimator({ hashes: 1, slots: 1 });

/** The default key: the client address from `X-Forwarded-For`, checked. */
const takeKey = (req: IncomingMessage): string => {
  const key = ipKey(clientIp(req, 1));
  keySink = key;
  return key;
};

/** The key alone, as a middleware of its own (on node:http and on Express). */
const keyPiece: Middleware = (req, _res, next) => {
  takeKey(req);
  next();
};

/** One call into the native core with a constant key, as a middleware of its own. */
const checkPiece: Middleware = (_req, _res, next) => {
  sink = partLimiter.check('x', 1);
  next();
};

/** The setups by name: `<framework>-<limiter>`; `-none` is each framework's baseline. */
export const SETUPS: Record<string, Setup> = {
  'node-none': nodeServer([]),
  // The two RateLimit header fields `rateLimit` sends here, as constants, with no limiter: what
  // Node charges any middleware for them (a validating `setHeader` each, then their serialization),
  // the floor under `rateLimit` with its headers on.
  'node-headers': nodeServer([sendRateLimitFields]),
  'node-rateLimit': nodeServer([rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1 })]),
  // `node-headers` plus the two pieces every limiter here does per request, in the same one layer:
  // the default key and one native call that takes it (`floorSketch`). On node:http, whose
  // hello-world is ~20 µs a request, they cost a few percent, and what they cost over
  // `node-headers` is the yardstick of `rateLimit`'s honest target there (http-targets.ts).
  'node-pieces': nodeServer([
    (req, res, next) => {
      sink = floorSketch.get(takeKey(req));
      sendRateLimitFields(req, res, next);
    },
  ]),
  'node-tokenBucket': nodeServer([tokenBucket({ limiter: openLimiter(), trustProxy: 1 })]),
  'node-upstreamLimit': nodeServer([upstreamLimit({ max: LIMIT, upstream: () => 'origin' })]),
  'express-none': expressServer([]),
  // Express's own cost of one more middleware layer: the floor under every Express limiter.
  'express-noop': expressServer([(_req, _res, next) => next()]),
  // The floor under Express's `rateLimit`: one more layer (as express-noop) sending the two fields.
  'express-headers': expressServer([sendRateLimitFields]),
  'express-rateLimit': expressServer([
    rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1 }) as express.RequestHandler,
  ]),
  'express-tokenBucket': expressServer([
    tokenBucket({ limiter: openLimiter(), trustProxy: 1 }) as express.RequestHandler,
  ]),
  'express-upstreamLimit': expressServer([
    upstreamLimit({ max: LIMIT, upstream: () => 'origin' }) as express.RequestHandler,
  ]),
  'express-erl-memory': expressServer([
    expressRateLimit({ windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-8', legacyHeaders: false }),
  ]),
  'express-erl-keepcount': expressServer([
    expressRateLimit({
      windowMs: WINDOW_MS,
      limit: LIMIT,
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      store: new KeepcountStore(),
    }),
  ]),
  'fastify-none': fastifyServer(async () => {}),
  'fastify-frl-local': fastifyServer(async (app) => {
    await app.register(fastifyRateLimit, { max: LIMIT, timeWindow: WINDOW_MS });
  }),
  'fastify-frl-keepcount': fastifyServer(async (app) => {
    await app.register(fastifyRateLimit, { max: LIMIT, timeWindow: WINDOW_MS, store: keepcountFastifyStore() });
  }),
};

const partQuota = new WindowQuota({ limit: LIMIT, windowMs: WINDOW_MS });
const rowTable = new Estimator({ hashes: 1, slots: 8 * 51_072 });
const rowsTable = new Estimator({ hashes: 4, slots: 2 * 51_072 });
let partCounter = 0;

/**
 * What the limiters are made of, each as the only middleware of a hello-world: run by
 * name (`http.ts --setup express-part-key ...`), not by default. They tell how much of a limiter's
 * end-to-end cost each part carries (benchmark/README.md).
 */
export const PARTS: Record<string, Setup> = {
  // `rateLimit` with a sketch 1/10 the default's (160 KiB, which stays in L2), and with the sketch
  // alone (no heavy-hitter table): does the memory the count touches weigh end to end?
  'node-part-small-sketch': nodeServer([
    rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1, clients: 1_000 }),
  ]),
  'node-part-sketch-only': nodeServer([
    rateLimit({ limit: LIMIT, windowMs: WINDOW_MS, trustProxy: 1, heavyHitters: false }),
  ]),
  // `rateLimit`'s work piece by piece over the floor of its two fields (`node-headers`): the
  // fields' values computed per request as `rateLimit` does, the key with the fields as
  // constants, and the key and the count with the fields as constants.
  'node-part-computed-fields': nodeServer([
    (_req, res, next) => {
      partCounter = (partCounter + 1) & 7;
      res.setHeader('RateLimit-Policy', RATE_LIMIT_POLICY);
      res.setHeader('RateLimit', `"default";r=${LIMIT - 1 - partCounter};t=${WINDOW_MS / 1000}`);
      next();
    },
  ]),
  'node-part-key-fields': nodeServer([
    (req, res, next) => {
      takeKey(req);
      sendRateLimitFields(req, res, next);
    },
  ]),
  'node-part-key-consume-fields': nodeServer([
    (req, res, next) => {
      sink = partQuota.consume(ipKey(clientIp(req, 1)));
      sendRateLimitFields(req, res, next);
    },
  ]),
  // The key and one count into a table the size of `rateLimit`'s (two windows of 4 × 51,072
  // counters, 3.3 MB): in one row (one cold atomic add, the least a count into memory sized for
  // the clients touches), and in four rows with no clock or heavy-hitter table.
  'node-part-key-row-fields': nodeServer([
    (req, res, next) => {
      sink = rowTable.incr(takeKey(req));
      sendRateLimitFields(req, res, next);
    },
  ]),
  'node-part-key-rows-fields': nodeServer([
    (req, res, next) => {
      sink = rowsTable.incr(takeKey(req));
      sendRateLimitFields(req, res, next);
    },
  ]),
  // One more node:http middleware that does nothing: what a layer costs there (as express-noop).
  'node-part-noop': nodeServer([(_req, _res, next) => next()]),
  // The key alone, and one native call with a constant key, with nothing sent.
  'node-key': nodeServer([keyPiece]),
  'node-check': nodeServer([checkPiece]),
  // Allocates about what a key extraction does, without parsing.
  'express-part-alloc': expressServer([
    (req, _res, next) => {
      sink = { rows: [1, 2, 3], parts: String(req.headers['x-forwarded-for']).split('.') };
      next();
    },
  ]),
  'express-part-key': expressServer([keyPiece]),
  'express-part-check': expressServer([checkPiece]),
  // The default clock of keepcount's limiters, and the one it replaced (lib/clock.ts).
  'express-part-hrtime': expressServer([
    (_req, _res, next) => {
      sink = process.hrtime();
      next();
    },
  ]),
  'express-part-performance-now': expressServer([
    (_req, _res, next) => {
      sink = performance.now();
      next();
    },
  ]),
  'express-part-key-check': expressServer([
    (req, _res, next) => {
      sink = partLimiter.check(ipKey(clientIp(req, 1)), 1);
      next();
    },
  ]),
};

/** One function's share of a profile (`profile.ts`). */
export interface ProfileRow {
  /** `name file:line`. */
  where: string;
  /** Self time as a share of the samples in which the process was not idle. */
  share: number;
}

let session: Session | undefined;

/**
 * Starts V8's sampling profiler (every 25 µs) or stops it and answers with every function's self
 * time, largest first: what `profile.ts` prints.
 */
async function profiler(message: 'profile-start' | 'profile-stop'): Promise<ProfileRow[]> {
  if (message === 'profile-start') {
    session = new Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 25 });
    await session.post('Profiler.start');
    return [];
  }
  const { profile } = await session!.post('Profiler.stop');
  session!.disconnect();
  const where = new Map(
    profile.nodes.map((node) => {
      const { functionName, url, lineNumber } = node.callFrame;
      return [node.id, `${functionName || '(anonymous)'} ${url.slice(url.lastIndexOf('/') + 1)}:${lineNumber + 1}`];
    }),
  );
  const self = new Map<string, number>();
  for (const id of profile.samples ?? []) {
    const name = where.get(id)!;
    self.set(name, (self.get(name) ?? 0) + 1);
  }
  const busy = (profile.samples?.length ?? 0) - (self.get('(idle) :0') ?? 0);
  self.delete('(idle) :0');
  return [...self].map(([name, samples]) => ({ where: name, share: samples / busy })).sort((a, b) => b.share - a.share);
}

async function main(): Promise<void> {
  const name = process.argv[2] ?? '';
  const setup = SETUPS[name] ?? PARTS[name];
  if (setup === undefined) {
    throw new Error(`unknown setup ${JSON.stringify(name)}; one of ${[...Object.keys(SETUPS), ...Object.keys(PARTS)]}`);
  }
  const port = await setup();
  process.on('message', (message) => {
    if (message === 'profile-start' || message === 'profile-stop') {
      void profiler(message).then((answer) => process.send!(answer));
    } else if (message === 'usage') {
      const cpu = process.cpuUsage();
      process.send!({
        rss: process.memoryUsage().rss,
        cpuUs: cpu.user + cpu.system,
        sink: `${typeof sink} ${typeof keySink}`,
      } satisfies ServerUsage);
    }
  });
  process.stdout.write(`${JSON.stringify({ port })}\n`);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
