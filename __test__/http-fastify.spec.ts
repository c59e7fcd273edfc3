import test from 'ava';
import Fastify, { type FastifyReply } from 'fastify';
import { HeavyHitters, Inflight, Limiter, ManualClock } from '../lib/index.js';
import { rateLimitHook, tokenBucketHook, upstreamLimitHook, keepcountFastify } from '../lib/http/fastify.js';
import { UpstreamLimit, WindowQuota } from '../lib/http/index.js';
import { title } from './helpers.js';
import { abortAfter, deferred, eventually, get, limitFields, parseField, pipelineAndLeave } from './http-client.js';

async function start(app: ReturnType<typeof Fastify>): Promise<number> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  return address.port;
}

test(
  title('fastify plugin: refuses past the limit with RateLimit headers and Retry-After, skip and key honoured'),
  async (t) => {
    const clock = new ManualClock();
    const app = Fastify();
    await app.register(keepcountFastify, {
      rateLimit: {
        limit: 2,
        windowMs: 10_000,
        clock,
        policy: 'api',
        trustProxy: 1,
        skip: (request) => request.url === '/health',
      },
    });
    app.get('/', async () => 'ok');
    app.get('/health', async () => 'up');
    const port = await start(app);
    t.teardown(() => app.close());

    const statuses = [];
    for (let i = 0; i < 3; i++) {
      const r = await get(port, '/', { 'x-forwarded-for': '203.0.113.1' });
      statuses.push(r.status);
      t.deepEqual(parseField(r.headers['ratelimit-policy']), { name: 'api', params: { q: 2, w: 10 } });
      t.deepEqual(parseField(r.headers.ratelimit), { name: 'api', params: { r: Math.max(0, 1 - i), t: 10 } });
    }
    t.deepEqual(statuses, [200, 200, 429]);
    t.is((await get(port, '/', { 'x-forwarded-for': '203.0.113.2' })).status, 200, 'another client behind the proxy');
    const health = await get(port, '/health', { 'x-forwarded-for': '203.0.113.1' });
    t.is(health.status, 200);
    t.is(health.headers.ratelimit, undefined);
    clock.advance(10_000);
    t.is((await get(port, '/', { 'x-forwarded-for': '203.0.113.1' })).status, 200);
  },
);

test(title('fastify hook: headers: false sends no RateLimit fields, and Retry-After on refusals only'), async (t) => {
  const clock = new ManualClock();
  const app = Fastify();
  app.get('/', { onRequest: rateLimitHook({ limit: 1, windowMs: 30_000, clock, headers: false }) }, async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());

  const [first, second] = [await get(port, '/'), await get(port, '/')];
  t.deepEqual([first.status, second.status], [200, 429]);
  t.deepEqual([first, second].map(limitFields), [
    { policy: undefined, rateLimit: undefined, retryAfter: undefined },
    { policy: undefined, rateLimit: undefined, retryAfter: '30' },
  ]);
});

test(title('fastify hook: a custom refusal handler answers'), async (t) => {
  const clock = new ManualClock();
  const app = Fastify();
  const onRequest = rateLimitHook({
    limit: 0,
    windowMs: 1000,
    clock,
    onLimit: (_request, reply, decision) => reply.code(429).send({ retryInMs: decision.resetMs }),
  });
  app.get('/', { onRequest }, async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());
  const r = await get(port, '/');
  t.is(r.status, 429);
  t.deepEqual(JSON.parse(r.body), { retryInMs: 1000 });
  t.is(r.headers['retry-after'], '1');
});

test(title('fastify hooks: an onLimit that hijacks the reply still sends the refusal’s header fields'), async (t) => {
  // Answering on reply.raw after reply.hijack() bypasses the reply's headers: the refusal's fields
  // are on the raw response too, as the node middleware's are on `res`.
  const app = Fastify();
  const hijack = (_request: unknown, reply: FastifyReply) => {
    reply.hijack();
    reply.raw.writeHead(429, { 'content-type': 'text/plain' });
    reply.raw.end('slow down\n');
  };
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 1, burst: 1 } } });
  const clock = new ManualClock();
  app.get(
    '/rate',
    { onRequest: rateLimitHook({ limit: 1, windowMs: 60_000, clock, onLimit: hijack }) },
    async () => 'ok',
  );
  app.get(
    '/quiet',
    { onRequest: rateLimitHook({ limit: 0, windowMs: 60_000, clock, headers: false, onLimit: hijack }) },
    async () => 'ok',
  );
  app.get('/bucket', { onRequest: tokenBucketHook({ limiter, onLimit: hijack }) }, async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());

  t.is((await get(port, '/rate')).status, 200);
  const rate = await get(port, '/rate');
  t.is(rate.status, 429);
  t.is(rate.body, 'slow down\n');
  t.deepEqual(parseField(rate.headers['ratelimit-policy']), { name: 'default', params: { q: 1, w: 60 } });
  t.deepEqual(parseField(rate.headers.ratelimit), { name: 'default', params: { r: 0, t: 60 } });
  t.is(rate.headers['retry-after'], '60');
  const quiet = await get(port, '/quiet');
  t.is(quiet.headers['retry-after'], '60');
  t.is(quiet.headers.ratelimit, undefined);
  t.is((await get(port, '/bucket')).status, 200);
  const bucket = await get(port, '/bucket');
  t.is(bucket.status, 429);
  t.is(bucket.headers['retry-after'], '1');
});

test(title('fastify plugin: options that would install no hook are refused at registration'), async (t) => {
  // @fastify/rate-limit's own shape, a misspelt hook and nothing at all registered cleanly and
  // protected nothing; the node middleware refuses the same mistakes.
  for (const options of [{ limit: 2, windowMs: 60_000 }, { ratelimit: { limit: 2, windowMs: 60_000 } }, {}]) {
    const app = Fastify();
    await t.throwsAsync(
      async () => {
        await app.register(keepcountFastify, options as never);
        await app.ready();
      },
      { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' },
      JSON.stringify(options),
    );
    await app.close();
  }
  // A prefix, which Fastify ignores for a plugin that is not encapsulated: its hook limited every
  // route of the scope (a /health beside /api) where the caller meant /api alone.
  const prefixed = Fastify();
  await t.throwsAsync(
    async () => {
      await prefixed.register(keepcountFastify, { prefix: '/api', rateLimit: { limit: 1, windowMs: 60_000 } });
      await prefixed.ready();
    },
    { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message: /"prefix" option of keepcountFastify/ },
  );
  await prefixed.close();
  // What else Fastify's register takes for itself passes through.
  const app = Fastify();
  await app.register(keepcountFastify, { logLevel: 'warn', rateLimit: { limit: 1, windowMs: 60_000 } });
  app.get('/', async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());
  t.deepEqual([(await get(port, '/')).status, (await get(port, '/')).status], [200, 429]);
});

test(title('fastify hook: 503 above the in-flight threshold, slots released on finish, error and abort'), async (t) => {
  const limit = new UpstreamLimit({ max: 1 });
  const app = Fastify();
  const gate = deferred();
  let arrived = deferred();
  app.get('/slow', { onRequest: upstreamLimitHook({ limit }) }, async () => {
    arrived.resolve();
    await gate.promise;
    return 'ok';
  });
  app.get('/fail', { onRequest: upstreamLimitHook({ limit }) }, async () => {
    throw new Error('upstream failed');
  });
  app.get('/hang', { onRequest: upstreamLimitHook({ limit }) }, (_request, _reply) => {
    arrived.resolve(); // never replies: only the client's abort ends it
  });
  const port = await start(app);
  t.teardown(() => app.close());

  const slow = get(port, '/slow');
  await arrived.promise;
  t.is(limit.inflight.get('default'), 1);
  t.is((await get(port, '/slow')).status, 503);
  gate.resolve();
  t.is((await slow).status, 200);
  t.true(await eventually(() => limit.inflight.get('default') === 0));
  t.is((await get(port, '/fail')).status, 500);
  t.true(await eventually(() => limit.inflight.get('default') === 0));
  for (let i = 0; i < 3; i++) {
    arrived = deferred();
    await abortAfter(port, '/hang', arrived.promise);
    t.true(await eventually(() => limit.inflight.get('default') === 0), `abort ${i} released`);
  }
});

test(title('fastify hook: a pipelining client that leaves gives back every slot it took'), async (t) => {
  const limit = new UpstreamLimit({ max: 20 });
  const app = Fastify();
  let arrivals = 0;
  let all = deferred();
  app.get('/hang', { onRequest: upstreamLimitHook({ limit }) }, (_request, _reply) => {
    if (++arrivals === 20) all.resolve(); // never replies: only the client leaving ends these
  });
  app.get('/', { onRequest: upstreamLimitHook({ limit }) }, async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());

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

test(
  title('fastify hooks: a failing or missing key, cost or upstream reaches the error handler, never the route'),
  async (t) => {
    const keyError = Object.assign(new Error('no key for this request'), { code: 'E_TEST_KEY' });
    const throwKey = () => {
      throw keyError;
    };
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 10, burst: 10 } } });
    const thrown = { instanceOf: Error, code: 'E_TEST_KEY', message: 'no key for this request' };
    const cases = {
      '/rate-key': { onRequest: rateLimitHook({ limit: 5, windowMs: 1000, key: throwKey }), error: thrown },
      '/bucket-key': { onRequest: tokenBucketHook({ limiter, key: throwKey }), error: thrown },
      '/bucket-nan': {
        onRequest: tokenBucketHook({ limiter, cost: () => NaN }),
        error: {
          instanceOf: RangeError,
          code: 'ERR_OUT_OF_RANGE',
          message: 'The "cost" argument must be a safe integer >= 0. Received NaN',
        },
      },
      '/upstream': { onRequest: upstreamLimitHook({ max: 1, upstream: throwKey }), error: thrown },
      // A function that finds nothing fails the request rather than taking the default.
      '/bucket-no-cost': {
        onRequest: tokenBucketHook({ limiter, cost: () => undefined as unknown as number }),
        error: {
          instanceOf: TypeError,
          code: 'ERR_INVALID_ARG_TYPE',
          message: 'The "cost" option\'s result must be of type number. Received undefined',
        },
      },
      '/upstream-no-client': {
        onRequest: upstreamLimitHook({ max: 5, perClient: 1, key: () => undefined as unknown as string }),
        error: {
          instanceOf: TypeError,
          code: 'ERR_INVALID_ARG_TYPE',
          message: 'The "key" option\'s result must be of type string. Received undefined',
        },
      },
    };
    const app = Fastify();
    const errors: unknown[] = [];
    let admitted = 0;
    app.setErrorHandler(async (error, _request, reply) => {
      errors.push(error);
      return reply.code(500).send('failed');
    });
    for (const [path, { onRequest }] of Object.entries(cases)) {
      app.get(path, { onRequest }, async () => {
        admitted++;
        return 'admitted';
      });
    }
    const port = await start(app);
    t.teardown(() => app.close());
    for (const [path, { error }] of Object.entries(cases)) {
      t.is((await get(port, path)).status, 500, path);
      t.throws(
        () => {
          throw errors.at(-1);
        },
        error,
        path,
      );
    }
    t.is(errors.length, Object.keys(cases).length);
    t.is(admitted, 0);
  },
);

test(title('fastify plugin: a token-bucket Limiter refuses past the burst with Retry-After'), async (t) => {
  const clock = new ManualClock();
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 2, burst: 2 } }, clock });
  const app = Fastify();
  await app.register(keepcountFastify, { tokenBucket: { limiter } });
  app.get('/', async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await get(port, '/')).status);
  t.deepEqual(statuses, [200, 200, 429]);
  t.is((await get(port, '/')).headers['retry-after'], '1');
  clock.advance(500);
  t.is((await get(port, '/')).status, 200);
});

test(title('fastify hooks list their top talkers'), async (t) => {
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 1000, burst: 1000 } } });
  const limit = rateLimitHook({
    limit: 100,
    windowMs: 60_000,
    heavyHitters: { threshold: 1 },
    key: (request) => String(request.headers['x-client']),
  });
  const bucket = tokenBucketHook({
    limiter,
    talkers: new HeavyHitters({ intervalMs: 60_000, threshold: 1 }),
    key: (request) => String(request.headers['x-client']),
  });
  const inflight = upstreamLimitHook({
    max: 10,
    talkers: new HeavyHitters({ intervalMs: 60_000, threshold: 1 }),
    upstream: () => 'search',
  });
  const app = Fastify();
  app.get('/', { onRequest: [limit, bucket, inflight] }, async () => 'ok');
  const port = await start(app);
  t.teardown(() => app.close());
  for (let i = 0; i < 3; i++) t.is((await get(port, '/', { 'x-client': 'heavy' })).status, 200);
  await get(port, '/', { 'x-client': 'light' });
  t.deepEqual(limit.topTalkers(1), [{ key: 'heavy', lower: 3, upper: 3 }]);
  t.deepEqual(bucket.topTalkers(2), [
    { key: 'heavy', lower: 3, upper: 3 },
    { key: 'light', lower: 1, upper: 1 },
  ]);
  t.deepEqual(inflight.topTalkers(5), [{ key: 'search', lower: 4, upper: 4 }]);
});

// Serial, so that no other test's app closes while the prototypes are spied on.
test.serial(title('fastify plugin: what it made closes with the app, what it was given stays open'), async (t) => {
  // Spies on the prototypes: the plugin keeps its quota and limit to itself.
  const closed: object[] = [];
  const spy = <T extends { close(): void }>(proto: T): (() => void) => {
    const original = proto.close;
    proto.close = function (this: T) {
      closed.push(this);
      original.call(this);
    };
    return () => {
      proto.close = original;
    };
  };
  const restore = [spy(WindowQuota.prototype), spy(UpstreamLimit.prototype)];
  t.teardown(() => restore.forEach((undo) => undo()));

  const made = Fastify();
  await made.register(keepcountFastify, {
    rateLimit: { limit: 10, windowMs: 60_000 },
    upstreamLimit: { max: 2, inflight: new Inflight() },
  });
  made.get('/', async () => 'ok');
  const port = await start(made);
  t.is((await get(port, '/')).status, 200);
  await made.close();
  t.is(closed.length, 2, 'the quota and the limit the plugin made');
  t.true(closed[0] instanceof WindowQuota);
  t.true(closed[1] instanceof UpstreamLimit);

  closed.length = 0;
  const quota = new WindowQuota({ limit: 10, windowMs: 60_000 });
  const limit = new UpstreamLimit({ max: 2 });
  const given = Fastify();
  await given.register(keepcountFastify, { rateLimit: { quota }, upstreamLimit: { limit } });
  given.get('/', async () => 'ok');
  const givenPort = await start(given);
  t.is((await get(givenPort, '/')).status, 200);
  await given.close();
  t.deepEqual(closed, [], 'nothing given is closed');
  t.is(quota.consume('after').allowed, true);
  t.is(limit.enter('after').allowed, true);
});
