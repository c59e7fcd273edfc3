/** The demo's two loopback servers: a sometimes-slow upstream and the protected proxy in front. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Estimator, Inflight, Rate } from '../lib/index.js';
import {
  isDeadlineError,
  rateLimit,
  slotsFor,
  upstreamLimit,
  UpstreamLimit,
  withDeadline,
  type RateLimitMiddleware,
  type RequestQuota,
} from '../lib/http/index.js';

/** How the demo protects the upstream; printed with the results. */
export const protection = {
  /** Requests per client per window. */
  limit: 20,
  windowMs: 1000,
  /** Calls in flight to the upstream at once. */
  maxInflight: 8,
  /** Deadline of one upstream call. */
  deadlineMs: 150,
};

/**
 * Counters every process of the host shares (`--cluster`): the rate limit's window and the
 * upstream's in-flight count, so the limits hold for all workers together.
 */
export interface Shared {
  rate: Rate;
  inflight: Inflight;
}

/**
 * The shared counters named `prefix`-rate and `prefix`-inflight, opened or created. `processes`
 * is how many processes hold the in-flight segment at once (each takes one of its slots, fixed
 * when it is created): every opener must pass the same.
 */
export function openShared(prefix: string, processes: number): Shared {
  return {
    // Sized for rateLimit's default 10,000 clients a window, as its own sketch would be: a Rate's
    // default 1,024 slots is a sketch a flood of 2,048 addresses fills.
    rate: Rate.openShared(`${prefix}-rate`, {
      intervalMs: protection.windowMs,
      seed: SHARED_SEED,
      slots: slotsFor(10_000, 4),
    }),
    inflight: Inflight.openShared(`${prefix}-inflight`, { seed: SHARED_SEED, processes }),
  };
}

/** Removes the shared counters named `prefix`-…. */
export function unlinkShared(prefix: string): void {
  Rate.unlink(`${prefix}-rate`);
  Estimator.unlink(`${prefix}-inflight`); // Estimator.unlink removes any segment, in-flight ones included
}

/**
 * The seed every worker opens the shared counters with (a shared sketch needs one seed). Fixed for
 * the demo; a service keeps its seed secret (README, "Heavy hitters").
 */
const SHARED_SEED = 0x6b656570n;

/** Upstream behaviour: fast, except every `slowEvery`th request during the brownout. */
export const upstreamShape = { fastMs: 5, slowMs: 400, slowEvery: 3 };

export async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return (server.address() as AddressInfo).port;
}

/** An upstream that answers in `fastMs`, or `slowMs` for every `slowEvery`th request while browned out. */
export function upstream(brownedOut: () => boolean): Server {
  let served = 0;
  return createServer((_req, res) => {
    const slow = brownedOut() && ++served % upstreamShape.slowEvery === 0;
    const timer = setTimeout(
      () => res.end('hello from upstream\n'),
      slow ? upstreamShape.slowMs : upstreamShape.fastMs,
    );
    res.on('close', () => clearTimeout(timer));
  });
}

/**
 * Where the proxy counts, when not in its own process-local counters: the host-shared ones
 * (`--cluster`), or a quota synced across machines with its in-flight count process-local
 * (`--redis`).
 */
export type Counters = Shared | { quota: RequestQuota };

/**
 * The protected proxy: a rate limit per client, an in-flight cap on the upstream, and a deadline
 * on each upstream call. Clients are told apart by their `x-client` header because every demo
 * client shares 127.0.0.1; a real deployment keys by client IP (`trustProxy` set to its proxies),
 * since a header the client writes is a key the client chooses.
 */
export function proxy(
  upstreamPort: number,
  counters?: Counters,
): { server: Server; inflight: UpstreamLimit; limit: RateLimitMiddleware } {
  const shared = counters !== undefined && 'rate' in counters ? counters : undefined;
  const inflight = new UpstreamLimit({ max: protection.maxInflight, inflight: shared?.inflight });
  const key = (req: IncomingMessage): string => String(req.headers['x-client'] ?? 'anonymous');
  // A synced quota brings its own limit and window (rateLimit refuses both given).
  const limit =
    counters !== undefined && 'quota' in counters
      ? rateLimit({ quota: counters.quota, key })
      : rateLimit({ limit: protection.limit, windowMs: protection.windowMs, rate: shared?.rate, key });
  const chain = [limit, upstreamLimit({ limit: inflight, upstream: () => 'origin' })];
  const forward = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    // The client going away aborts the upstream call too.
    const gone = new AbortController();
    res.on('close', () => gone.abort());
    try {
      const reply = await withDeadline(
        protection.deadlineMs,
        async (signal) => {
          const r = await fetch(`http://127.0.0.1:${upstreamPort}${req.url ?? '/'}`, { signal });
          return { status: r.status, body: await r.text() };
        },
        { signal: gone.signal },
      );
      res.statusCode = reply.status;
      res.end(reply.body);
    } catch (error) {
      res.statusCode = isDeadlineError(error) ? 504 : 502;
      res.end();
    }
  };
  const server = createServer((req, res) => {
    const run = (i: number): void => {
      const mw = chain[i];
      if (mw === undefined) return void forward(req, res);
      mw(req, res, (error) => (error === undefined ? run(i + 1) : res.writeHead(500).end()));
    };
    run(0);
  });
  return { server, inflight, limit };
}
