/**
 * The HTTP middleware's error paths on real HTTP servers: a key, skip, cost or upstream function
 * that fails answers 500 on plain node:http and reaches next(error) on Express, never the handler;
 * bad options are refused with keepcount error codes.
 */
import test from 'ava';
import express from 'express';
import { createServer } from 'node:http';
import { Limiter, Rate } from '../lib/index.js';
import {
  UpstreamLimit,
  WindowQuota,
  rateLimit,
  rateLimitHeaders,
  slotsFor,
  tokenBucket,
  upstreamLimit,
  type Middleware,
  type RateLimitDecision,
  type RequestQuota,
} from '../lib/http/index.js';
import { runFixture, title, type ErrorShape } from './helpers.js';
import { close, get, listen } from './http-client.js';

/** The error of a per-request function option that returned `undefined` where `expected` is needed. */
const missing = (name: string, expected: string): ErrorShape => ({
  instanceOf: TypeError,
  code: 'ERR_INVALID_ARG_TYPE',
  message: `The "${name}" option's result must be ${expected}. Received undefined`,
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
    // A function that finds nothing (a header the client left out) fails the request: taken for
    // "not given", it cost 1 token and escaped the per-client cap.
    '/bucket-no-cost': {
      mw: tokenBucket({ limiter, cost: () => undefined as unknown as number }),
      error: missing('cost', 'of type number'),
    },
    // A number would count as a key does, but could not be told apart in the per-client counts.
    '/upstream-number': {
      mw: upstreamLimit({ max: 5, perClient: 1, upstream: () => 11 as unknown as string }),
      error: {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /The "key" argument must be of type string/,
      },
    },
    '/upstream-no-client': {
      mw: upstreamLimit({ max: 5, perClient: 1, key: () => undefined as unknown as string }),
      error: missing('key', 'of type string'),
    },
    // A custom quota's decision goes out only as rateLimitHeaders would send it, as on Fastify.
    '/quota-remaining': {
      mw: rateLimit({ quota: answering({ remaining: -1 }) }),
      error: { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message: /"decision\.remaining"/ },
    },
    '/quota-policy': {
      mw: rateLimit({ quota: answering({ policy: 'pü"' }) }),
      error: { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message: /"decision\.policy"/ },
    },
    // With headers off a refusal's resetMs is all that is sent: NaN went out as `Retry-After: NaN`.
    '/quota-reset-headers-off': {
      mw: rateLimit({ quota: answering({ allowed: false, resetMs: NaN }), headers: false }),
      error: { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message: /"decision\.resetMs"/ },
    },
  };
}

/** A custom quota answering every request with a decision of `fields`. */
function answering(fields: Partial<RateLimitDecision>): RequestQuota {
  return {
    consume: (key) => ({
      allowed: true,
      policy: 'custom',
      limit: 10,
      count: 1,
      remaining: 9,
      resetMs: 1000,
      windowMs: 1000,
      key,
      ...fields,
    }),
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

test(title('rateLimitHeaders still refuses a policy the middleware met in a custom quota’s decision'), async (t) => {
  // The fields remember the last policy made, and the check trusts what they remember: a policy
  // the middleware formatted unchecked was then sent by rateLimitHeaders too.
  const bad = answering({ policy: 'pü"' });
  const limit = rateLimit({ quota: bad });
  const server = createServer((req, res) => limit(req, res, () => res.end('admitted')));
  const port = await listen(server);
  t.teardown(() => close(server));
  t.is((await get(port, '/')).status, 500);
  t.throws(() => rateLimitHeaders(bad.consume('k')), { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' });
});

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

test(
  title('express: a function failing with a value Express reads as going on still never reaches the handler'),
  async (t) => {
    // Express takes next(undefined | null | 0 | '') for "go on" and next('route') for "the next
    // route": passed on as they are, these refusals and failures would be admitted.
    const values: Record<string, unknown> = { undefined, null: null, zero: 0, empty: '', route: 'route' };
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 10, burst: 10 } } });
    const errors: unknown[] = [];
    let admitted = 0;
    const app = express();
    for (const [name, value] of Object.entries(values)) {
      const fail = (): never => {
        throw value;
      };
      const failAsync = async (): Promise<never> => fail();
      app.get(`/limit-throws/${name}`, rateLimit({ limit: 0, windowMs: 1000, onLimit: fail }));
      app.get(`/limit-rejects/${name}`, rateLimit({ limit: 0, windowMs: 1000, onLimit: failAsync }));
      app.get(`/key/${name}`, rateLimit({ limit: 5, windowMs: 1000, key: fail }));
      app.get(`/cost/${name}`, tokenBucket({ limiter, cost: fail }));
      app.get(`/upstream/${name}`, upstreamLimit({ max: 1, upstream: fail }));
    }
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
    for (const path of ['limit-throws', 'limit-rejects', 'key', 'cost', 'upstream']) {
      for (const [name, value] of Object.entries(values)) {
        t.is((await get(port, `/${path}/${name}`)).status, 500, `${path} ${name}`);
        const error = errors.at(-1) as Error & { code?: string };
        t.is(error.code, 'ERR_KEEPCOUNT_CALLBACK', `${path} ${name}`);
        t.is(error.cause, value, `${path} ${name}`);
      }
    }
    t.is(admitted, 0, 'no refused or failing request reached a handler');
  },
);

test(title('options are validated with keepcount error codes'), (t) => {
  t.throws(() => rateLimit({ limit: -1, windowMs: 1000 }), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, trustProxy: true as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "trustProxy" option must be false, a number or a function. Received type boolean (true)',
  });
  t.throws(() => rateLimit({ quota: {} as WindowQuota }), { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, headers: 'draft-8' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "headers" option must be a boolean. Received type string ("draft-8")',
  });
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

test(title('options another option makes moot are refused, not dropped'), (t) => {
  // Before, each of these ran on the quota's limit, the rate's sketch or the UpstreamLimit's max.
  const quota = new WindowQuota({ limit: 5, windowMs: 1000 });
  // @ts-expect-error the types refuse the pair too (option-types.spec.ts)
  t.throws(() => rateLimit({ quota, limit: 100, windowMs: 1000 }), {
    instanceOf: TypeError,
    code: 'ERR_INCOMPATIBLE_OPTION_PAIR',
    message:
      'The "quota" option cannot be used with "limit", "windowMs": a quota has its own limit, window and counters',
  });
  const rate = new Rate({ intervalMs: 1000 });
  // @ts-expect-error the types refuse the pair too
  t.throws(() => rateLimit({ limit: 5, windowMs: 1000, rate, clients: 100_000 }), {
    instanceOf: TypeError,
    code: 'ERR_INCOMPATIBLE_OPTION_PAIR',
    message: /^The "rate" option cannot be used with "clients": a Rate has its own shape, seed and clock/,
  });
  t.notThrows(() => rateLimit({ limit: 5, windowMs: 1000, rate }));
  const limit = new UpstreamLimit({ max: 20 });
  // @ts-expect-error the types refuse the pair too
  t.throws(() => upstreamLimit({ limit, max: 2 }), {
    instanceOf: TypeError,
    code: 'ERR_INCOMPATIBLE_OPTION_PAIR',
    message: 'The "limit" option cannot be used with "max": an UpstreamLimit has its own max and counters',
  });
  t.true(slotsFor(10_000, 4) === 51_072, 'slotsFor sizes a shared Rate as rateLimit sizes its own');
  rate.close();
});

test(title('a framework told to trust a proxy while keepcount was not is warned about, once'), async (t) => {
  // Before, keepcount silently keyed every client by the proxy's address (one limit for all).
  for (const mode of ['express', 'fastify', 'express-explicit']) {
    const run = await runFixture('trust-proxy-warning.ts', { args: [mode] });
    t.is(run.code, 0, run.stderr);
    const { statuses, warnings } = JSON.parse(run.stdout) as { statuses: number[]; warnings: { code?: string }[] };
    t.deepEqual(statuses, [200, 200], mode);
    const codes = warnings.map((warning) => warning.code).filter((code) => code === 'KEEPCOUNT_TRUST_PROXY');
    t.deepEqual(codes, mode === 'express-explicit' ? [] : ['KEEPCOUNT_TRUST_PROXY'], mode);
  }
});
