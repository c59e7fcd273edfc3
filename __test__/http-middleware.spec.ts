import test from 'ava';
import express from 'express';
import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { HeavyHitters, Limiter, ManualClock, sleep } from '../lib/index.js';
import {
  ipKey,
  isDeadlineError,
  WindowQuota,
  rateLimit,
  tokenBucket,
  upstreamLimit,
  UpstreamLimit,
  withDeadline,
  type Middleware,
} from '../lib/http/index.js';
import { rejectsShape, title, type ErrorShape } from './helpers.js';
import { abortAfter, close, deferred, eventually, get, listen, parseField, pipelineAndLeave } from './http-client.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** The same middleware chain and handler, mounted on plain node:http or on Express. */
const frameworks: Record<string, (chain: Middleware[], handler: Handler) => Server> = {
  'node:http': (chain, handler) =>
    createServer((req, res) => {
      const run = (i: number): void => {
        if (i === chain.length) {
          Promise.resolve(handler(req, res)).catch(() => res.writeHead(500).end());
          return;
        }
        chain[i]!(req, res, (error) => (error === undefined ? run(i + 1) : res.writeHead(500).end()));
      };
      run(0);
    }),
  express: (chain, handler) => {
    const app = express();
    for (const mw of chain) app.use(mw);
    app.get('/{*path}', (req, res, next) => Promise.resolve(handler(req, res)).catch(next));
    return createServer(app);
  },
};

const ok: Handler = (_req, res) => void res.end('ok');

for (const [name, serve] of Object.entries(frameworks)) {
  test(
    title(`${name}: refuses past the limit with RateLimit headers, Retry-After, and again allows after the window`),
    async (t) => {
      const clock = new ManualClock();
      const server = serve([rateLimit({ limit: 3, windowMs: 60_000, clock })], ok);
      const port = await listen(server);
      t.teardown(() => close(server));

      const replies = [];
      for (let i = 0; i < 5; i++) replies.push(await get(port));
      t.deepEqual(
        replies.map((r) => r.status),
        [200, 200, 200, 429, 429],
      );
      for (const [i, r] of replies.entries()) {
        t.deepEqual(parseField(r.headers['ratelimit-policy']), { name: 'default', params: { q: 3, w: 60 } });
        t.deepEqual(parseField(r.headers.ratelimit), { name: 'default', params: { r: Math.max(0, 2 - i), t: 60 } });
      }
      t.is(replies[0]!.headers['retry-after'], undefined);
      t.is(replies[3]!.headers['retry-after'], '60');
      t.is(replies[3]!.body, 'Too Many Requests\n');

      clock.advance(45_000);
      const late = await get(port);
      t.is(late.status, 429);
      t.is(parseField(late.headers.ratelimit).params.t, 15);
      t.is(late.headers['retry-after'], '15');

      clock.advance(15_000);
      const next = await get(port);
      t.is(next.status, 200);
      t.is(parseField(next.headers.ratelimit).params.r, 2);
    },
  );

  test(title(`${name}: ignores X-Forwarded-For unless trusted, then believes exactly the trusted hops`), async (t) => {
    const clock = new ManualClock();
    const untrusted = serve([rateLimit({ limit: 1, windowMs: 1000, clock })], ok);
    const oneHop = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1 })], ok);
    const byFn = serve(
      [rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: (ip) => ip === '127.0.0.1' || ip === '10.0.0.1' })],
      ok,
    );
    const ports = await Promise.all([untrusted, oneHop, byFn].map(listen));
    t.teardown(() => Promise.all([untrusted, oneHop, byFn].map(close)));
    const [u, o, f] = ports as [number, number, number];

    // Untrusted: a client rotating X-Forwarded-For is still one client.
    t.is((await get(u, '/', { 'x-forwarded-for': '203.0.113.1' })).status, 200);
    t.is((await get(u, '/', { 'x-forwarded-for': '203.0.113.2' })).status, 429);

    // One trusted hop: the last entry is the client; what the client prepended is ignored.
    t.is((await get(o, '/', { 'x-forwarded-for': '198.51.100.9, 203.0.113.1' })).status, 200);
    t.is((await get(o, '/', { 'x-forwarded-for': '198.51.100.8, 203.0.113.1' })).status, 429);
    t.is((await get(o, '/', { 'x-forwarded-for': '203.0.113.2' })).status, 200);
    // Garbage instead of an address keys the request by the proxy, not by the garbage.
    t.is((await get(o, '/', { 'x-forwarded-for': 'not-an-ip' })).status, 200);
    t.is((await get(o, '/', { 'x-forwarded-for': 'also-not' })).status, 429);

    // A trust function walks back through trusted proxies: 10.0.0.1 is one, 203.0.113.5 the client.
    t.is((await get(f, '/', { 'x-forwarded-for': '203.0.113.5, 10.0.0.1' })).status, 200);
    t.is((await get(f, '/', { 'x-forwarded-for': '198.51.100.1, 203.0.113.5, 10.0.0.1' })).status, 429);
    t.is((await get(f, '/', { 'x-forwarded-for': '203.0.113.6, 10.0.0.1' })).status, 200);
  });

  test(
    title(`${name}: keys IPv6 clients by their /56 (or the configured prefix) and IPv4-mapped ones as IPv4`),
    async (t) => {
      const clock = new ManualClock();
      const by56 = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1 })], ok);
      const by64 = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1, ipv6Subnet: 64 })], ok);
      const whole = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1, ipv6Subnet: false })], ok);
      const [p56, p64, pAll] = (await Promise.all([by56, by64, whole].map(listen))) as [number, number, number];
      t.teardown(() => Promise.all([by56, by64, whole].map(close)));
      const status = async (port: number, ip: string) => (await get(port, '/', { 'x-forwarded-for': ip })).status;

      t.is(await status(p56, '2001:db8:1:2::1'), 200);
      t.is(await status(p56, '2001:db8:1:2::2'), 429, 'another address of the same /64');
      t.is(await status(p56, '2001:db8:1:ff:abcd::9'), 429, 'another /64 of the same /56');
      t.is(await status(p56, '2001:DB8:0001:0002:0:0:0:3'), 429, 'another spelling of the same /56');
      t.is(await status(p56, '2001:db8:1:100::1'), 200, 'the next /56 is another client');

      t.is(await status(p56, '::ffff:203.0.113.7'), 200);
      t.is(await status(p56, '::ffff:cb00:7107'), 429, 'the same IPv4 client in hexadecimal');
      t.is(await status(p56, '203.0.113.7'), 429, 'and in plain IPv4');
      t.is(await status(p56, '::ffff:203.0.113.8'), 200, 'IPv4-mapped clients are not lumped into one prefix');

      t.is(await status(p64, '2001:db8:1:2::1'), 200);
      t.is(await status(p64, '2001:db8:1:2:ffff::1'), 429);
      t.is(await status(p64, '2001:db8:1:3::1'), 200, 'ipv6Subnet: 64 tells /64s apart');

      t.is(await status(pAll, '2001:db8:1:2::1'), 200);
      t.is(await status(pAll, '2001:db8:1:2:0:0:0:1'), 429, 'the same address spelled out');
      t.is(await status(pAll, '2001:db8:1:2::2'), 200, 'ipv6Subnet: false keys whole addresses');
    },
  );

  test(title(`${name}: skip rules pass requests uncounted and a custom handler answers refusals`), async (t) => {
    const clock = new ManualClock();
    const server = serve(
      [
        rateLimit({
          limit: 1,
          windowMs: 1000,
          clock,
          key: (req) => String(req.headers['x-client']),
          skip: (req) => req.url === '/health',
          onLimit: (_req, res, decision) => {
            res.statusCode = 418;
            res.end(`slow down ${decision.key}: ${decision.count}/${decision.limit}`);
          },
        }),
      ],
      ok,
    );
    const port = await listen(server);
    t.teardown(() => close(server));

    for (let i = 0; i < 3; i++) {
      const health = await get(port, '/health', { 'x-client': 'a' });
      t.is(health.status, 200);
      t.is(health.headers.ratelimit, undefined);
    }
    t.is((await get(port, '/', { 'x-client': 'a' })).status, 200);
    const refused = await get(port, '/', { 'x-client': 'a' });
    t.is(refused.status, 418);
    t.is(refused.body, 'slow down a: 2/1');
    t.is(refused.headers['retry-after'], '1');
    t.is((await get(port, '/', { 'x-client': 'b' })).status, 200);
  });

  test(
    title(`${name}: answers 503 above the in-flight threshold and releases on finish, error and client abort`),
    async (t) => {
      const limit = new UpstreamLimit({ max: 2 });
      const gate = deferred();
      let arrivals = 0;
      const arrived = [deferred(), deferred()];
      const server = serve([upstreamLimit({ limit, upstream: () => 'origin' })], async (req, res) => {
        arrivals++;
        arrived[arrivals - 1]?.resolve();
        if (req.url === '/fail') throw new Error('upstream failed');
        if (req.url === '/hang') return; // never answers: only the client's abort ends it
        await gate.promise;
        res.end('ok');
      });
      const port = await listen(server);
      t.teardown(() => close(server));

      const slow = [get(port, '/slow'), get(port, '/slow')];
      await Promise.all(arrived.map((d) => d.promise));
      t.is(limit.inflight.get('origin'), 2);
      const over = await get(port, '/slow');
      t.is(over.status, 503);
      t.is(over.headers['retry-after'], '1');
      t.is(limit.inflight.get('origin'), 2, 'a refused request holds no slot');
      gate.resolve();
      t.deepEqual(
        (await Promise.all(slow)).map((r) => r.status),
        [200, 200],
      );
      t.true(await eventually(() => limit.inflight.get('origin') === 0), 'finished requests release');

      t.is((await get(port, '/fail')).status, 500);
      t.true(await eventually(() => limit.inflight.get('origin') === 0), 'failed requests release');

      for (let round = 0; round < 3; round++) {
        const here = [deferred(), deferred()];
        const before = arrivals;
        const watch = setInterval(() => {
          if (arrivals >= before + 1) here[0]!.resolve();
          if (arrivals >= before + 2) here[1]!.resolve();
        }, 2);
        await Promise.all([abortAfter(port, '/hang', here[0]!.promise), abortAfter(port, '/hang', here[1]!.promise)]);
        clearInterval(watch);
        t.true(await eventually(() => limit.inflight.get('origin') === 0), `aborted requests release (round ${round})`);
      }
      t.is((await get(port, '/fail')).status, 500, 'slots are free again: no 503');
    },
  );

  test(title(`${name}: a pipelining client that leaves gives back every slot it took`), async (t) => {
    const limit = new UpstreamLimit({ max: 20 });
    let arrivals = 0;
    let all = deferred();
    const server = serve([upstreamLimit({ limit })], (req, res) => {
      if (req.url === '/hang') {
        if (++arrivals === 20) all.resolve();
        return; // never answers: only the client leaving ends these
      }
      res.end('ok');
    });
    const port = await listen(server);
    t.teardown(() => close(server));

    for (let burst = 0; burst < 2; burst++) {
      arrivals = 0;
      all = deferred();
      const leaving = pipelineAndLeave(port, '/hang', 20, all.promise);
      await all.promise;
      t.is(limit.inflight.get('default'), 20, 'every pipelined request took a slot');
      await leaving;
      const left = performance.now();
      t.true(await eventually(() => limit.inflight.get('default') === 0, 1000), `burst ${burst}: all released`);
      t.log(`burst ${burst}: in-flight back to 0 ${(performance.now() - left).toFixed(1)} ms after the client left`);
    }
    const legit = await Promise.all(Array.from({ length: 5 }, () => get(port, '/')));
    t.deepEqual(
      legit.map((r) => r.status),
      [200, 200, 200, 200, 200],
    );
  });

  test(title(`${name}: a request that reaches upstreamLimit after its connection died holds no slot`), async (t) => {
    const limit = new UpstreamLimit({ max: 20 });
    let waiting = 0;
    const all = deferred();
    // Holds each request until its connection is gone, as a slow middleware before the limit would.
    const untilGone: Middleware = (req, _res, next) => {
      if (++waiting === 5) all.resolve();
      req.socket.once('close', () => setImmediate(next));
    };
    let reached = 0;
    const server = serve([untilGone, upstreamLimit({ limit })], (_req, res) => {
      reached++;
      res.end('ok');
    });
    const port = await listen(server);
    t.teardown(() => close(server));
    await pipelineAndLeave(port, '/', 5, all.promise);
    t.true(await eventually(() => reached === 5, 1000), 'every request went on after its connection died');
    t.is(limit.inflight.get('default'), 0);
  });

  test(title(`${name}: a deadline on the upstream call answers 504 when it is slow`), async (t) => {
    // Margins wide enough for a loaded machine (the suite runs specs side by side): the fast path
    // gets 2 s to answer, the slow upstream would take 4 s, and the 100 ms deadline ends it.
    const upstream = createServer((req, res) => {
      const delay = req.url === '/slow' ? 4000 : 0;
      const timer = setTimeout(() => res.end('upstream'), delay);
      res.on('close', () => clearTimeout(timer));
    });
    const upstreamPort = await listen(upstream);
    t.teardown(() => close(upstream));
    const server = serve([], async (req, res) => {
      try {
        const reply = await withDeadline(req.url === '/slow' ? 100 : 2000, (signal) =>
          fetch(`http://127.0.0.1:${upstreamPort}${req.url}`, { signal }),
        );
        res.end(await reply.text());
      } catch (error) {
        res.statusCode = isDeadlineError(error) ? 504 : 502;
        res.end();
      }
    });
    const port = await listen(server);
    t.teardown(() => close(server));

    const fast = await get(port, '/fast');
    t.is(fast.status, 200);
    t.is(fast.body, 'upstream');
    const started = performance.now();
    t.is((await get(port, '/slow')).status, 504);
    t.true(performance.now() - started < 3000, 'the deadline, not the upstream, ended it');
  });
}

test(title('withDeadline rejects with TimeoutError even when the call ignores the signal'), async (t) => {
  const error = await t.throwsAsync(withDeadline(20, () => sleep(2000)));
  t.is((error as Error & { code?: string }).code, 'ERR_KEEPCOUNT_TIMEOUT');
  t.true(isDeadlineError(error));
  t.false(isDeadlineError(new Error('refused')));
  t.is(await withDeadline(1000, async (signal) => signal.aborted), false);
});

/** Middleware whose own functions fail, each with the error the caller's error path must see. */
function failing(): Record<string, { mw: Middleware; error: ErrorShape }> {
  const keyError = Object.assign(new Error('no key for this request'), { code: 'E_TEST_KEY' });
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 10, burst: 10 } } });
  const throwKey = () => {
    throw keyError;
  };
  const thrown = { instanceOf: Error, code: 'E_TEST_KEY', message: 'no key for this request' };
  return {
    '/rate-key': { mw: rateLimit({ limit: 5, windowMs: 1000, key: throwKey }), error: thrown },
    '/rate-skip': { mw: rateLimit({ limit: 5, windowMs: 1000, skip: throwKey }), error: thrown },
    '/bucket-key': { mw: tokenBucket({ limiter, key: throwKey }), error: thrown },
    '/bucket-nan': {
      mw: tokenBucket({ limiter, cost: () => NaN }),
      error: {
        instanceOf: RangeError,
        code: 'ERR_OUT_OF_RANGE',
        message: 'The "cost" argument must be a safe integer >= 0. Received NaN',
      },
    },
    '/upstream': { mw: upstreamLimit({ max: 1, upstream: throwKey }), error: thrown },
  };
}

test(
  title('node:http: a failing key, skip, cost or upstream answers 500 when next() cannot take an error'),
  async (t) => {
    const cases = failing();
    let admitted = 0;
    const server = createServer((req, res) =>
      cases[req.url!]!.mw(req, res, () => {
        admitted++;
        res.end('admitted');
      }),
    );
    const port = await listen(server);
    t.teardown(() => close(server));
    for (const path of Object.keys(cases)) {
      const reply = await get(port, path);
      t.is(reply.status, 500, path);
      t.is(reply.body, 'Internal Server Error\n', path);
    }
    t.is(admitted, 0, 'no failing request reached the handler');
  },
);

test(title('express: a failing key, skip, cost or upstream reaches next(error), never the handler'), async (t) => {
  const cases = failing();
  const errors: unknown[] = [];
  let admitted = 0;
  const app = express();
  for (const [path, { mw }] of Object.entries(cases)) app.use(path, mw);
  app.get('/{*path}', (_req, res) => {
    admitted++;
    res.send('admitted');
  });
  app.use((error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    errors.push(error);
    res.status(500).send('failed');
  });
  const server = createServer(app);
  const port = await listen(server);
  t.teardown(() => close(server));
  for (const [path, { error }] of Object.entries(cases)) {
    const before = errors.length;
    t.is((await get(port, path)).status, 500, path);
    t.is(errors.length, before + 1, path);
    t.throws(
      () => {
        throw errors.at(-1);
      },
      { instanceOf: error.instanceOf, code: error.code, message: error.message },
      path,
    );
  }
  t.is(admitted, 0, 'no failing request reached the handler');
});

test(title('ipKey keys addresses as express-rate-limit v8 and validates the prefix'), (t) => {
  t.is(ipKey('2001:db8:1:2::1'), '2001:db8:1::/56');
  t.is(ipKey('2001:db8:1:2ab::1', 64), '2001:db8:1:2ab::/64');
  t.is(ipKey('2001:db8::', 32), '2001:db8::/32');
  t.is(ipKey('fe80::1%eth0', 64), 'fe80::/64');
  t.is(ipKey('2001:DB8:0:0:1:0:0:1', false), '2001:db8::1:0:0:1');
  t.is(ipKey('::ffff:203.0.113.7'), '203.0.113.7');
  t.is(ipKey('::ffff:cb00:7107'), '203.0.113.7');
  t.is(ipKey('0:0:0:0:0:ffff:1.2.3.4', false), '1.2.3.4');
  t.is(ipKey('::203.0.113.7'), '203.0.113.7', 'the deprecated IPv4-compatible notation');
  t.is(ipKey('::1'), '::/56');
  t.is(ipKey('198.51.100.1'), '198.51.100.1');
  t.is(ipKey('unknown'), 'unknown');
  t.throws(() => ipKey('::1', 65), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "ipv6Subnet" option must be false or an integer in [32, 64]. Received 65',
  });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, ipv6Subnet: true as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "ipv6Subnet" option must be false or a number. Received type boolean (true)',
  });
});

test(title('options are validated with keepcount error codes'), (t) => {
  t.throws(() => rateLimit({ limit: -1, windowMs: 1000 }), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, trustProxy: true as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "trustProxy" option must be false, a number or a function. Received type boolean (true)',
  });
  t.throws(() => rateLimit({ quota: {} as WindowQuota }), { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, policy: 'naïve' }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
  });
  t.throws(() => upstreamLimit({ max: 0 }), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, clients: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "clients" option must be an integer in [1, 1000000]. Received 0',
  });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, clients: 1_000_000, hashes: 1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message:
      'The "clients" option must be small enough that hashes × slots <= 134217728 (it needs 999499918 slots with 1 hashes). Received 1000000',
  });
});

for (const [name, serve] of Object.entries(frameworks)) {
  test(
    title(`${name}: tokenBucket admits each key's burst, refuses with Retry-After, refills with time`),
    async (t) => {
      const clock = new ManualClock();
      const limiter = new Limiter({
        bestEffort: { requests: { perSecond: 1, burst: 2 } },
        keys: [
          ['gold', { requests: { perSecond: 10, burst: 5 } }],
          ['metered', { units: { perSecond: 100, burst: 10 } }],
        ],
        clock,
      });
      const server = serve(
        [
          tokenBucket({
            limiter,
            key: (req) => String(req.headers['x-api-key'] ?? ''),
            cost: (req) => Number(req.headers['x-cost'] ?? 1),
            skip: (req) => req.url === '/health',
          }),
        ],
        ok,
      );
      const port = await listen(server);
      t.teardown(() => close(server));
      const statuses = async (n: number, headers: Record<string, string>) => {
        const out = [];
        for (let i = 0; i < n; i++) out.push((await get(port, '/', headers)).status);
        return out;
      };

      t.deepEqual(await statuses(6, { 'x-api-key': 'gold' }), [200, 200, 200, 200, 200, 429]);
      t.deepEqual(
        await statuses(3, { 'x-api-key': 'anyone' }),
        [200, 200, 429],
        'unknown keys share the best-effort bucket',
      );
      const refused = await get(port, '/', { 'x-api-key': 'someone-else' });
      t.is(refused.status, 429);
      t.is(refused.headers['retry-after'], '1');
      t.is(refused.headers.ratelimit, undefined, 'no window, so no RateLimit fields');
      t.is((await get(port, '/health', { 'x-api-key': 'anyone' })).status, 200);
      t.is((await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '8' })).status, 200);
      const short = await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '8' });
      t.is(short.status, 429, 'the cost counts in units');
      t.is(short.headers['retry-after'], '1');
      const never = await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '11' });
      t.is(never.status, 429);
      t.is(never.headers['retry-after'], undefined, 'a cost above the burst never fits: no Retry-After');
      clock.advance(1000);
      t.deepEqual(await statuses(1, { 'x-api-key': 'anyone' }), [200]);
    },
  );
}

for (const [name, serve] of Object.entries(frameworks)) {
  test(title(`${name}: rateLimit, tokenBucket and upstreamLimit list their top talkers`), async (t) => {
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 1000, burst: 1000 } } });
    const talkers = new HeavyHitters({ intervalMs: 60_000, threshold: 1 });
    const upstreams = new HeavyHitters({ intervalMs: 60_000, threshold: 1 });
    // Threshold 1: every client is listed (by default only those past a quarter of the limit are).
    const limit = rateLimit({
      limit: 100,
      windowMs: 60_000,
      heavyHitters: { threshold: 1 },
      key: (req) => String(req.headers['x-client']),
    });
    const bucket = tokenBucket({ limiter, talkers, key: (req) => String(req.headers['x-client']) });
    const inflight = upstreamLimit({ max: 10, talkers: upstreams, upstream: (req) => req.url ?? '/' });
    const bare = tokenBucket({ limiter });
    const server = serve([limit, bucket, inflight, bare], ok);
    const port = await listen(server);
    t.teardown(() => close(server));
    for (let i = 0; i < 5; i++) await get(port, '/search', { 'x-client': 'heavy' });
    await get(port, '/login', { 'x-client': 'light' });
    t.deepEqual(limit.topTalkers(2), [
      { key: 'heavy', lower: 5, upper: 5 },
      { key: 'light', lower: 1, upper: 1 },
    ]);
    t.deepEqual(bucket.topTalkers(1), [{ key: 'heavy', lower: 5, upper: 5 }]);
    t.deepEqual(inflight.topTalkers(1, 'both'), [{ key: '/search', lower: 5, upper: 5 }]);
    t.deepEqual(bare.topTalkers(3), [], 'a token bucket without talkers keeps no counts to list');
    t.throws(() => tokenBucket({ limiter, talkers: {} as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /The "talkers" option must be a HeavyHitters/,
    });
  });
}

test(title('end to end: under a flood of 2,048 addresses no client within its limit gets a 429'), async (t) => {
  t.timeout(60_000);
  // Issue 17's attack through a real server: the flood fills the small 4 × 1024 sketch that once
  // refused about half of the fresh clients on their first request. Each client is an address in
  // X-Forwarded-For behind one trusted proxy hop. Deterministic: no false-failure probability.
  const limit = rateLimit({ limit: 5, windowMs: 600_000, hashes: 4, slots: 1024, trustProxy: 1 });
  const server = createServer((req, res) => limit(req, res, () => res.end('ok')));
  const port = await listen(server);
  t.teardown(() => close(server));
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  t.teardown(() => agent.destroy());
  const send = (ip: string): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, agent, headers: { 'x-forwarded-for': ip } }, (res) =>
        res.resume().on('end', () => resolve(res.statusCode ?? 0)),
      );
      req.on('error', reject);
      req.end();
    });
  const flood = Array.from({ length: 2048 }, (_, i) => `198.18.${i >> 8}.${i & 255}`);
  let floodRefused = 0;
  for (let round = 0; round < 6; round++) {
    const statuses = await Promise.all(flood.map(send));
    if (round < 5)
      t.true(
        statuses.every((s) => s === 200),
        `round ${round + 1}: a flooder within its limit got 429`,
      );
    else floodRefused = statuses.filter((s) => s === 429).length;
  }
  const fresh = Array.from({ length: 256 }, (_, i) => `203.0.113.${i}`);
  const first = await Promise.all(fresh.map(send));
  t.is(first.filter((s) => s === 429).length, 0, 'fresh clients refused on their first request');
  // The threshold is ceil(5 / 4) = 2: a flooder entered the table by its second request at the
  // latest, so its sixth is refused unless it entered on its second (then five counted exactly).
  t.log(`flooders refused on their 6th request: ${floodRefused} of 2048`);
  const seventh = await Promise.all(flood.slice(0, 256).map(send));
  t.true(
    seventh.every((s) => s === 429),
    'every flooder is refused by its 7th request',
  );
});

test(title('withDeadline rejects, never throws, for a bad signal option or one whose getter throws'), async (t) => {
  /** The promise withDeadline returns, asserting that it returned one rather than throwing. */
  const called = (options: { signal?: AbortSignal }): Promise<unknown> => {
    let returned: Promise<unknown> = Promise.resolve();
    t.notThrows(() => {
      returned = withDeadline(1000, async () => 'called', options);
    });
    return returned;
  };
  await rejectsShape(t, called({ signal: 'abort' as unknown as AbortSignal }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "signal" option must be an AbortSignal. Received type string ("abort")',
  });
  const getterError = new Error('no signal');
  const throwing = {
    get signal(): AbortSignal {
      throw getterError;
    },
  };
  t.is(await t.throwsAsync(called(throwing)), getterError);
});
