// @fastify/rate-limit with keepcount's store: per-route counts, fake timers, options checked up
// front, skipOnError, keys that are not strings, and timeWindow values that change.
import fastifyRateLimitPlugin from '@fastify/rate-limit';
import test, { type ExecutionContext } from 'ava';
import Fastify from 'fastify';
import { mock } from 'node:test';
import { inspect } from 'node:util';
import { ManualClock } from '../lib/index.js';
import { KeepcountFastifyStore, keepcountFastifyStore } from '../lib/http/index.js';
import { title } from './helpers.js';
import { get } from './http-client.js';

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

/** Bad options of `keepcountFastifyStore`, each with the error class, code and message it must throw. */
const badFastifyOptions: [
  options: object,
  instanceOf: typeof TypeError | typeof RangeError,
  code: string,
  message: RegExp,
][] = [
  [{ clients: -1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "clients" option must be an integer in \[1, 1000000\]/],
  [{ clients: '10' }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "clients" option must be of type number/],
  [{ clients: 1_000_000, hashes: 1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "clients" option must be small enough/],
  [{ hashes: 'x' }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "hashes" option must be of type number/],
  [{ hashes: 0 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "hashes" option must be an integer in \[1, 32\]/],
  [{ slots: 0 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "slots" option must be an integer/],
  [{ hashes: 4, slots: 2 ** 26 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "slots" option must be at most 33554432/],
  [{ seed: {} }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "seed" option must be of type bigint or number/],
  [{ seed: -1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "seed" option must be a safe integer >= 0/],
  [{ clock: 3 }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "clock" option must be an object with a now\(\) method/],
  [{ heavyHitters: 5 }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "heavyHitters" option must be a boolean or an object/],
  [{ heavyHitters: { threshold: 0 } }, RangeError, 'ERR_OUT_OF_RANGE', /^The "threshold" option must be an integer/],
  [{ heavyHitters: { capacity: -1 } }, RangeError, 'ERR_OUT_OF_RANGE', /^The "capacity" option must be an integer/],
];

test(title('keepcountFastifyStore() refuses each bad option where it is given, not at the first request'), (t) => {
  // Checked at the first incr, a bad option failed every request, and with the plugin's
  // skipOnError let every request through uncounted.
  for (const [options, instanceOf, code, message] of badFastifyOptions) {
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
  // String() itself throws: an error through the callback, nothing thrown at the plugin.
  await t.throwsAsync(incr(Object.create(null)), { instanceOf: TypeError });
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
