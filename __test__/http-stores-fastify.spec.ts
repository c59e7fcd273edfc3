// @fastify/rate-limit with keepcount's store: per-route counts, fake timers, options checked up
// front, skipOnError, keys that are not strings, and timeWindow values that change.
import fastifyRateLimitPlugin from '@fastify/rate-limit';
import test, { type ExecutionContext } from 'ava';
import Fastify from 'fastify';
import { mock } from 'node:test';
import { inspect } from 'node:util';
import { ManualClock, Rate } from '../lib/index.js';
import { KeepcountFastifyStore, keepcountFastifyStore } from '../lib/http/index.js';
import { title } from './helpers.js';
import { get } from './http-client.js';
import { badStoreOptions } from './http-store-options.js';

test(title('@fastify/rate-limit with the keepcount store limits globally and per route through child()'), async (t) => {
  const clock = new ManualClock();
  const app = Fastify();
  await app.register(fastifyRateLimitPlugin, { max: 2, timeWindow: 5000, store: keepcountFastifyStore({ clock }) });
  app.get('/', async () => 'ok');
  app.get('/strict', { config: { rateLimit: { max: 1, timeWindow: 1000 } } }, async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as { port: number };

  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await get(port, '/')).status);
  t.deepEqual(statuses, [200, 200, 429]);
  const refused = await get(port, '/');
  t.is(refused.headers['x-ratelimit-limit'], '2');
  t.is(refused.headers['x-ratelimit-remaining'], '0');
  t.is(refused.headers['retry-after'], '5');

  t.is((await get(port, '/strict')).status, 200, 'the route counts on its own');
  t.is((await get(port, '/strict')).status, 429);
  clock.advance(1000);
  t.is((await get(port, '/strict')).status, 200);
  t.is((await get(port, '/')).status, 429, 'the global window has not turned');
  clock.advance(4000);
  t.is((await get(port, '/')).status, 200);
});

test.serial(
  title('@fastify/rate-limit with the default keepcount store follows fake timers, as LocalStore'),
  async (t) => {
    // node:test's mock timers, faking Date only, as a user's existing tests would. Serial: ava runs
    // serial tests before concurrent ones, so no other test sees the fake Date.
    mock.timers.enable({ apis: ['Date'], now: 1_000_000 });
    t.teardown(() => mock.timers.reset());
    const app = Fastify();
    await app.register(fastifyRateLimitPlugin, { max: 1, timeWindow: 1000, store: KeepcountFastifyStore });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.teardown(() => app.close());
    const { port } = app.server.address() as { port: number };
    t.is((await get(port, '/')).status, 200);
    t.is((await get(port, '/')).status, 429);
    mock.timers.tick(1000);
    t.is((await get(port, '/')).status, 200, 'the faked second turned the window');
  },
);

test(title('the fastify store reads without counting, and refuses per-key window extensions'), async (t) => {
  const clock = new ManualClock();
  const Store = keepcountFastifyStore({ clock });
  const store = new Store({});
  const call = (method: 'incr' | 'read', key: string) =>
    new Promise<{ current: number; ttl: number }>((resolve, reject) =>
      store[method](key, (error, result) => (error ? reject(error) : resolve(result!)), 1000, 5),
    );
  t.deepEqual(await call('read', 'a'), { current: 0, ttl: 0 });
  t.deepEqual(await call('incr', 'a'), { current: 1, ttl: 1000 });
  clock.advance(250);
  t.deepEqual(await call('incr', 'a'), { current: 2, ttl: 750 });
  t.deepEqual(await call('read', 'a'), { current: 2, ttl: 750 });
  t.throws(() => new KeepcountFastifyStore({ continueExceeding: true }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_UNSUPPORTED',
    message: 'The keepcount store shares one window between keys and cannot support continueExceeding',
  });
  t.throws(() => store.child({ exponentialBackoff: true }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_UNSUPPORTED',
    message: 'The keepcount store shares one window between keys and cannot support exponentialBackoff',
  });
});

test(title('keepcountFastifyStore() refuses each bad option where it is given, not at the first request'), (t) => {
  // Checked at the first incr, a bad option failed every request, and with the plugin's
  // skipOnError let every request through uncounted.
  for (const [options, instanceOf, code, message] of badStoreOptions) {
    t.throws(() => keepcountFastifyStore(options as never), { instanceOf, code, message }, inspect(options));
  }
  // As KeepcountStore and WindowQuota, the store ignores names it does not know (the plugin's
  // `cache`, say, which does not apply to it).
  t.notThrows(() => keepcountFastifyStore({ cache: 5000 } as never));
});

test(title('@fastify/rate-limit with skipOnError: a bad store option fails at keepcountFastifyStore()'), async (t) => {
  // Before, registration went through and every request failed in the store, which skipOnError
  // let through uncounted: both of these requests got 200 under max 1, with no warning.
  const app = Fastify();
  t.teardown(() => app.close());
  const serve = async (): Promise<number[]> => {
    await app.register(fastifyRateLimitPlugin, {
      max: 1,
      timeWindow: 60_000,
      skipOnError: true,
      store: keepcountFastifyStore({ clients: -1 }),
    });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    return [(await get(port, '/')).status, (await get(port, '/')).status];
  };
  await t.throwsAsync(serve(), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message: /^The "clients" option/ });
});

test(title('@fastify/rate-limit with skipOnError: a request whose key is missing is still counted'), async (t) => {
  // The key comes from a header the client may leave out. Were the store to fail on `undefined`,
  // skipOnError would let every such request through uncounted; LocalStore counts them together.
  const app = Fastify();
  await app.register(fastifyRateLimitPlugin, {
    max: 2,
    timeWindow: 60_000,
    skipOnError: true,
    keyGenerator: (request) => request.headers['x-api-key'] as string,
    store: keepcountFastifyStore({ clock: new ManualClock() }),
  });
  app.get('/', async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as { port: number };
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await get(port, '/')).status);
  t.deepEqual(statuses, [200, 200, 429], 'requests without the header share one count');
  t.is((await get(port, '/', { 'x-api-key': 'k' })).status, 200, 'a client with its own key is counted apart');
});

test(title('the fastify store counts a key that is not a string under its String() form'), async (t) => {
  const store = new (keepcountFastifyStore({ clock: new ManualClock() }))({});
  const incr = (key: unknown) =>
    new Promise<number>((resolve, reject) =>
      store.incr(key as string, (error, result) => (error ? reject(error) : resolve(result!.current)), 1000, 5),
    );
  t.is(await incr(undefined), 1);
  t.is(await incr('undefined'), 2);
  t.is(await incr(5), 1);
  t.is(await incr('5'), 2);
  t.is(await incr(1.5), 1);
  t.is(await incr(Symbol('s')), 1);
  // String() itself throws: an error through the callback, nothing thrown at the plugin, coded as
  // other arguments of the wrong type.
  await t.throwsAsync(incr(Object.create(null)), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "key" argument must be a string or have a string form/,
  });
});

test(
  title('the fastify store keeps apart the counts of each timeWindow it is called with, in any order'),
  async (t) => {
    const store = new (keepcountFastifyStore({ clock: new ManualClock() }))({});
    const incr = (timeWindow: number) =>
      new Promise<number>((resolve, reject) =>
        store.incr('k', (error, result) => (error ? reject(error) : resolve(result!.current)), timeWindow, 5),
      );
    // The store remembers the last window's quota: switching back and forth must not mix counts.
    t.is(await incr(1000), 1);
    t.is(await incr(2000), 1);
    t.is(await incr(1000), 2);
    t.is(await incr(1000), 3);
    t.is(await incr(2000), 2);
    // A window that rounds up to the same whole milliseconds shares its quota, as before.
    t.is(await incr(999.5), 4);
    // A bad window after good ones is still refused, through the callback.
    await t.throwsAsync(incr(-1), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
    await t.throwsAsync(incr(Number.NaN), { instanceOf: RangeError });
    t.is(await incr(2000), 3);
  },
);

test(
  title('the fastify store refuses a 17th distinct timeWindow rather than count in a window of its own'),
  async (t) => {
    const store = new (keepcountFastifyStore({ clock: new ManualClock(), slots: 64 }))({});
    const incr = (timeWindow: number) =>
      new Promise<number>((resolve, reject) =>
        store.incr('k', (error, result) => (error ? reject(error) : resolve(result!.current)), timeWindow, 5),
      );
    for (let i = 1; i <= 16; i++) t.is(await incr(i * 1000), 1, `window ${i} counts apart`);
    await t.throwsAsync(incr(17_000), {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_UNSUPPORTED',
      message: /at most 16 distinct timeWindow values.*\(17000 ms\) after 16/,
    });
    // Refused, not made: the 17th fails again, and the 16 it has still count.
    await t.throwsAsync(incr(17_000), { code: 'ERR_KEEPCOUNT_UNSUPPORTED' });
    t.is(await incr(1000), 2);
    t.is(await incr(16_000), 2);
    // A route of its own (child) has its own 16.
    const child = store.child({});
    const childIncr = await new Promise<number>((resolve, reject) =>
      child.incr('k', (error, result) => (error ? reject(error) : resolve(result!.current)), 17_000, 5),
    );
    t.is(childIncr, 1);
  },
);

/**
 * A Fastify app limited by @fastify/rate-limit on the keepcount store, with a `timeWindow` that is
 * the time left until a fixed moment (`from` ms at first): a new value on every request. Were each
 * value a window of its own, every request would count 1 and the limit would never hold.
 */
async function driftingWindowApp(t: ExecutionContext, from: number, skipOnError: boolean): Promise<number> {
  let left = from;
  const app = Fastify();
  await app.register(fastifyRateLimitPlugin, {
    max: 2,
    skipOnError,
    timeWindow: () => left--,
    store: keepcountFastifyStore({ clock: new ManualClock(), slots: 64 }),
  });
  app.get('/', async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  return (app.server.address() as { port: number }).port;
}

test(
  title('@fastify/rate-limit with a timeWindow that changes per request fails loudly with the keepcount store'),
  async (t) => {
    const port = await driftingWindowApp(t, 60_000, false);
    const statuses = [];
    for (let i = 0; i < 18; i++) statuses.push((await get(port, '/', { 'x-forwarded-for': `10.0.0.${i}` })).status);
    t.deepEqual(statuses.slice(0, 16), Array(16).fill(200));
    t.deepEqual(statuses.slice(16), [500, 500], 'past 16 windows the store error reaches the plugin (skipOnError off)');
  },
);

test(
  title('with skipOnError, a 17th distinct timeWindow is a process warning, once, since the plugin drops the error'),
  async (t) => {
    // Windows from 50 s down, told apart from other tests' warnings (tests run concurrently).
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void => {
      if (warning.name === 'KeepcountWarning' && /\(49\d{3} ms\)/.test(warning.message)) warnings.push(warning);
    };
    process.on('warning', onWarning);
    t.teardown(() => process.off('warning', onWarning));
    const port = await driftingWindowApp(t, 50_000, true);
    for (let i = 0; i < 20; i++) t.is((await get(port, '/')).status, 200);
    // Warnings are emitted on the next tick.
    await new Promise((resolve) => setImmediate(resolve));
    t.is(warnings.length, 1);
    t.is((warnings[0] as Error & { code?: string }).code, 'ERR_KEEPCOUNT_UNSUPPORTED');
    t.regex(warnings[0]!.message, /at most 16 distinct timeWindow values/);
  },
);

/** The `KeepcountWarning`s emitted while a test runs whose message matches `pattern`. */
function keepcountWarnings(t: ExecutionContext, pattern: RegExp): (Error & { code?: string })[] {
  const warnings: (Error & { code?: string })[] = [];
  const onWarning = (warning: Error): void => {
    if (warning.name === 'KeepcountWarning' && pattern.test(warning.message)) warnings.push(warning);
  };
  process.on('warning', onWarning);
  t.teardown(() => process.off('warning', onWarning));
  return warnings;
}

/** The statuses of `n` requests to `/` of a listening Fastify `app`. */
async function statusesOf(app: ReturnType<typeof Fastify>, n: number, path = '/'): Promise<number[]> {
  const { port } = app.server.address() as { port: number };
  const statuses = [];
  for (let i = 0; i < n; i++) statuses.push((await get(port, path)).status);
  return statuses;
}

test(
  title("@fastify/rate-limit with a rate: a route's timeWindow other than its interval fails at registration"),
  async (t) => {
    // Before, registration went through and every request failed in the store (with skipOnError:
    // every request let through uncounted, without a word).
    const rate = new Rate({ intervalMs: 60_000 });
    const app = Fastify();
    t.teardown(() => app.close());
    const registered = app.register(fastifyRateLimitPlugin, {
      max: 3,
      timeWindow: 1000,
      skipOnError: true,
      store: keepcountFastifyStore({ rate }),
    });
    await t.throwsAsync(registered, {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message:
        'The "rate" option must be a Rate whose intervalMs is the plugin\'s timeWindow (1000), the window of every ' +
        'route without a config.rateLimit of its own (global: true): give the plugin timeWindow: 60000, or ' +
        'global: false if every route has its own. Received 60000',
    });

    // A route of its own (config.rateLimit) is checked as the plugin makes its store (child()).
    const routed = Fastify();
    t.teardown(() => routed.close());
    await routed.register(fastifyRateLimitPlugin, {
      max: 3,
      timeWindow: 60_000,
      store: keepcountFastifyStore({ rate }),
    });
    t.throws(() => routed.get('/other', { config: { rateLimit: { timeWindow: 5000 } } }, async () => 'ok'), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: /intervalMs is the route's timeWindow \(5000\)\. Received 60000$/,
    });
    routed.get('/', async () => 'ok');
    routed.get('/same', { config: { rateLimit: { max: 1, timeWindow: '1 minute' } } }, async () => 'ok');
    await routed.listen({ port: 0, host: '127.0.0.1' });
    t.deepEqual(await statusesOf(routed, 4), [200, 200, 200, 429]);

    // With `global: false` the plugin's own timeWindow (60 s unless given) counts nothing: only the
    // routes' windows must match.
    const local = Fastify();
    t.teardown(() => local.close());
    const quick = new Rate({ intervalMs: 1000 });
    await local.register(fastifyRateLimitPlugin, {
      global: false,
      max: 2,
      store: keepcountFastifyStore({ rate: quick }),
    });
    local.get('/', { config: { rateLimit: { timeWindow: 1000 } } }, async () => 'ok');
    await local.listen({ port: 0, host: '127.0.0.1' });
    t.deepEqual(await statusesOf(local, 3), [200, 200, 429]);
  },
);

test(
  title('with skipOnError, a store error only a request can meet is a process warning, once per kind'),
  async (t) => {
    // A timeWindow function returning another window than the rate's cannot be checked at
    // registration: each request fails in the store, which skipOnError drops without a word.
    const warnings = keepcountWarnings(t, /whose intervalMs is the windowMs \(4321\)/);
    const rate = new Rate({ intervalMs: 60_000 });
    const app = Fastify();
    t.teardown(() => app.close());
    await app.register(fastifyRateLimitPlugin, {
      max: 1,
      timeWindow: () => 4321,
      skipOnError: true,
      store: keepcountFastifyStore({ rate }),
    });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.deepEqual(await statusesOf(app, 3), [200, 200, 200], 'let through: the plugin drops store errors');
    await new Promise((resolve) => setImmediate(resolve));
    t.is(warnings.length, 1);
    t.is(warnings[0]!.code, 'ERR_OUT_OF_RANGE');
  },
);

test(title('keepcountFastifyStore() refuses a clock whose now() is not a finite number, where it is given'), (t) => {
  // Read once there: before, every request failed in the store (with skipOnError: let through
  // uncounted).
  for (const now of [Number.NaN, Infinity, '5', undefined]) {
    t.throws(() => keepcountFastifyStore({ clock: { now: () => now as number } }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: /^The clock's now\(\) must be a finite number of milliseconds/,
    });
  }
  // A rate keeps its own clock: the option is ignored then, as documented.
  t.notThrows(() => keepcountFastifyStore({ rate: new Rate({ intervalMs: 1000 }), clock: { now: () => Number.NaN } }));
});

test(title("@fastify/rate-limit refuses a route whose max is below the store's heavy-hitter threshold"), async (t) => {
  // With threshold 5 and max 2, a client read its sketch count up to 4, then its exact count from
  // 1 on: the route admitted requests 1–2, then 5–6.
  const Store = keepcountFastifyStore({ clock: new ManualClock(), heavyHitters: { threshold: 5 } });
  const app = Fastify();
  t.teardown(() => app.close());
  await t.throwsAsync(app.register(fastifyRateLimitPlugin, { max: 2, timeWindow: 60_000, store: Store }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message:
      'The "threshold" option must be an integer in [1, 2] (the plugin\'s max, the limit of every route without ' +
      'a config.rateLimit of its own (global: true): give the plugin a max of at least 5, or global: false if ' +
      'every route has its own). Received 5',
  });
  const routed = Fastify();
  t.teardown(() => routed.close());
  await routed.register(fastifyRateLimitPlugin, { max: 10, timeWindow: 60_000, store: Store });
  t.throws(() => routed.get('/strict', { config: { rateLimit: { max: 3 } } }, async () => 'ok'), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /^The "threshold" option must be an integer in \[1, 3\] \(the route's max\)/,
  });
  routed.get('/', async () => 'ok');
  routed.get('/blocked', { config: { rateLimit: { max: 0 } } }, async () => 'ok');
  await routed.listen({ port: 0, host: '127.0.0.1' });
  t.deepEqual(await statusesOf(routed, 15), [...Array<number>(14).fill(200), 429], 'max + threshold − 1');
  t.deepEqual(await statusesOf(routed, 1, '/blocked'), [429], 'max 0 (refuse all) takes any threshold');
});

test(
  title('a max function below the heavy-hitter threshold is a process warning, once, as it is known per request'),
  async (t) => {
    const warnings = keepcountWarnings(t, /threshold \(7\) is above the max \(3\)/);
    const app = Fastify();
    t.teardown(() => app.close());
    await app.register(fastifyRateLimitPlugin, {
      max: () => 3,
      timeWindow: 60_000,
      store: keepcountFastifyStore({ clock: new ManualClock(), heavyHitters: { threshold: 7 } }),
    });
    app.get('/', async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    await statusesOf(app, 3);
    await new Promise((resolve) => setImmediate(resolve));
    t.is(warnings.length, 1);
    t.is(warnings[0]!.code, 'ERR_OUT_OF_RANGE');
  },
);

test(
  title(
    'with global: false, fastify.rateLimit() without options fails each request on plugin options the store refuses',
  ),
  async (t) => {
    // @fastify/rate-limit's documented pattern: its own options limit no route, but
    // `fastify.rateLimit()` and `createRateLimit()` without options count in the plugin's store
    // under them. Unchecked, max 3 under threshold 5 admitted 200 200 200 429 200 200 200 429.
    const app = Fastify();
    t.teardown(() => app.close());
    await app.register(fastifyRateLimitPlugin, {
      global: false,
      max: 3,
      timeWindow: 60_000,
      store: keepcountFastifyStore({ clock: new ManualClock(), heavyHitters: { threshold: 5 } }),
    });
    app.get('/guarded', { onRequest: app.rateLimit() }, async () => 'ok');
    const limit = app.createRateLimit();
    app.get('/checked', async (request) => ((await limit(request)).isAllowed ? 'allowed' : 'counted'));
    // A route of its own is checked and counted as ever: the plugin's options may go unused.
    app.get('/own', { config: { rateLimit: { max: 6 } } }, async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as { port: number };
    const message =
      'The "threshold" option must be an integer in [1, 3] (the plugin\'s max, the limit of ' +
      'fastify.rateLimit() and createRateLimit() called without options, which fail with this error ' +
      '(global: false): give the plugin a max of at least 5, or pass those calls options of their own). Received 5';
    for (const path of ['/guarded', '/checked']) {
      const replies = [];
      for (let i = 0; i < 8; i++) replies.push(await get(port, path));
      t.deepEqual(
        replies.map((reply) => reply.status),
        Array(8).fill(500),
        `${path}: every request fails, none is counted`,
      );
      const body = JSON.parse(replies[0]!.body) as { code: string; message: string };
      t.deepEqual([body.code, body.message], ['ERR_OUT_OF_RANGE', message]);
    }
    t.deepEqual(await statusesOf(app, 11, '/own'), [...Array<number>(10).fill(200), 429], 'max + threshold − 1');
  },
);

test(
  title('with global: false and skipOnError, the plugin options a rate refuses are a warning naming the plugin'),
  async (t) => {
    // The plugin's default 60 s window under a 1 s rate. Each request fails in the store, which
    // skipOnError lets through: the warning has to say which options and what to do.
    const warnings = keepcountWarnings(t, /the plugin's timeWindow \(60000/);
    const app = Fastify();
    t.teardown(() => app.close());
    await app.register(fastifyRateLimitPlugin, {
      global: false,
      max: 3,
      skipOnError: true,
      store: keepcountFastifyStore({ rate: new Rate({ intervalMs: 1000 }) }),
    });
    app.get('/', { onRequest: app.rateLimit() }, async () => 'ok');
    await app.listen({ port: 0, host: '127.0.0.1' });
    t.deepEqual(await statusesOf(app, 5), Array(5).fill(200), 'let through: the plugin drops store errors');
    await new Promise((resolve) => setImmediate(resolve));
    t.is(warnings.length, 1);
    t.is(warnings[0]!.code, 'ERR_OUT_OF_RANGE');
    t.is(
      warnings[0]!.message,
      'The "rate" option must be a Rate whose intervalMs is the plugin\'s timeWindow (60000, its default ' +
        'when none is given), the window of fastify.rateLimit() and createRateLimit() called without options, ' +
        'which fail with this error (global: false): give the plugin timeWindow: 1000, or pass those calls ' +
        'options of their own. Received 1000',
    );
  },
);

test(
  title("with global: true, a rate other than the plugin's default timeWindow is refused, saying so and what to do"),
  async (t) => {
    // The store cannot tell whether any route goes without a config.rateLimit of its own (and so
    // counts in the plugin's window): refused at registration, naming the default the plugin filled
    // in rather than a 60000 the user never wrote as "the route's".
    const rate = new Rate({ intervalMs: 1000 });
    const app = Fastify();
    t.teardown(() => app.close());
    await t.throwsAsync(app.register(fastifyRateLimitPlugin, { max: 3, store: keepcountFastifyStore({ rate }) }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message:
        'The "rate" option must be a Rate whose intervalMs is the plugin\'s timeWindow (60000, its default ' +
        'when none is given), the window of every route without a config.rateLimit of its own (global: true): ' +
        'give the plugin timeWindow: 1000, or global: false if every route has its own. Received 1000',
    });
    // Either way out works.
    for (const fix of [{ timeWindow: 1000 }, { global: false }]) {
      const fixed = Fastify();
      t.teardown(() => fixed.close());
      await fixed.register(fastifyRateLimitPlugin, { max: 2, ...fix, store: keepcountFastifyStore({ rate }) });
      fixed.get('/', { config: { rateLimit: { timeWindow: 1000, keyGenerator: () => JSON.stringify(fix) } } }, ok);
      await fixed.listen({ port: 0, host: '127.0.0.1' });
      t.deepEqual(await statusesOf(fixed, 3), [200, 200, 429], JSON.stringify(fix));
    }
  },
);

const ok = async (): Promise<string> => 'ok';
