// express-rate-limit's KeepcountStore, and what both stores share (heavy hitters under a flood);
// @fastify/rate-limit's store is in http-stores-fastify.spec.ts.
import test from 'ava';
import express, { type NextFunction, type Request, type Response } from 'express';
import { MemoryStore, rateLimit as expressRateLimit } from 'express-rate-limit';
import { createServer } from 'node:http';
import { mock } from 'node:test';
import { inspect } from 'node:util';
import { ManualClock } from '../lib/index.js';
import { keepcountFastifyStore, KeepcountStore, type FastifyStore } from '../lib/http/index.js';
import { prng, throwsShape, title } from './helpers.js';
import { close, eventually, get, listen } from './http-client.js';
import { badStoreOptions } from './http-store-options.js';

test(
  title('express-rate-limit with KeepcountStore limits, sends its draft-8 headers, resets keys and windows'),
  async (t) => {
    const clock = new ManualClock();
    const store = new KeepcountStore({ clock, prefix: 'api:' });
    const limiter = expressRateLimit({
      windowMs: 60_000,
      limit: 2,
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      store,
      keyGenerator: (req) => String(req.headers['x-client']),
    });
    const app = express();
    app.use(limiter);
    app.get('/', (_req, res) => void res.send('ok'));
    const server = createServer(app);
    const port = await listen(server);
    t.teardown(() => close(server));
    const a = { 'x-client': 'a' };

    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await get(port, '/', a)).status);
    t.deepEqual(statuses, [200, 200, 429]);
    t.is((await get(port, '/', { 'x-client': 'b' })).status, 200);
    const info = await limiter.getKey('a');
    t.is(info?.totalHits, 3);
    t.true(info!.resetTime!.getTime() > Date.now() + 59_000);
    t.is((await limiter.getKey('never-seen'))?.totalHits, 0);

    const refused = await get(port, '/', a);
    t.regex(String(refused.headers.ratelimit), /^"2-in-1min"; r=0; t=60$/);
    t.is(refused.headers['retry-after'], '60');

    await limiter.resetKey('a');
    t.is((await limiter.getKey('a'))?.totalHits, 0);
    t.is((await get(port, '/', a)).status, 200, 'reset key starts over');

    clock.advance(60_000);
    t.is((await get(port, '/', { 'x-client': 'b' })).status, 200);
    t.is((await get(port, '/', { 'x-client': 'b' })).status, 200, 'a new window');
  },
);

test(title('KeepcountStore: decrement never goes below zero and resetAll forgets everyone'), async (t) => {
  const clock = new ManualClock();
  const store = new KeepcountStore({ clock });
  t.throws(() => store.increment('a'), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_UNINITIALIZED',
    message: 'KeepcountStore used before init(): pass it to express-rate-limit',
  });
  store.init({ windowMs: 1000 });
  t.is(store.localKeys, true);
  t.is(store.prefix, '');
  t.is(store.increment('a').totalHits, 1);
  t.is(store.increment('a').totalHits, 2);
  store.decrement('a');
  t.is(store.get('a')?.totalHits, 1);
  store.decrement('a');
  store.decrement('a');
  t.is(store.get('a').totalHits, 0);
  t.is(store.increment('a').totalHits, 1, 'no negative count left behind');
  store.increment('b');
  store.resetAll();
  t.is(store.get('a').totalHits, 0);
  t.is(store.get('b').totalHits, 0);
});

/** The request at which `store`'s `totalHits` first passes express-rate-limit's `limit: 100`. */
function firstOverOf(store: KeepcountStore): number {
  store.init({ windowMs: 60_000, limit: 100 } as never);
  for (let n = 1; n <= 200; n++) if (store.increment('client').totalHits > 100) return n;
  return Infinity;
}

test(title('KeepcountStore counts exactly from the threshold on: refused by limit + threshold − 1'), (t) => {
  // What README's "Counts near the limit" states: with limit 100 the default threshold is 25, so
  // totalHits first passes the limit at the 125th request; threshold 1 makes it MemoryStore's 101st.
  t.is(firstOverOf(new KeepcountStore({ clock: new ManualClock(), seed: 1n })), 125);
  t.is(firstOverOf(new KeepcountStore({ clock: new ManualClock(), seed: 1n, heavyHitters: { threshold: 1 } })), 101);
});

/**
 * Both stores on one row of 8 counters with `heavyHitters`, limit 4 a minute, after 200 clients sent
 * one request each: a sketch that reads high for everyone.
 */
async function floodedStores(heavyHitters: object): Promise<{ express: KeepcountStore; store: FastifyStore }> {
  const express = new KeepcountStore({ clock: new ManualClock(), hashes: 1, slots: 8, seed: 1n, heavyHitters });
  express.init({ windowMs: 60_000, limit: 4 } as never);
  for (let i = 0; i < 200; i++) express.increment(`flooder-${i}`);
  const store = new (keepcountFastifyStore({ clock: new ManualClock(), hashes: 1, slots: 8, seed: 1n, heavyHitters }))(
    {},
  );
  for (let i = 0; i < 200; i++) await callStore(store, 'incr', `flooder-${i}`);
  return { express, store };
}

/** The Fastify store's `incr` or `read` of `key` in a 60 s window with `max` 4: the count it reports. */
const callStore = (store: FastifyStore, method: 'incr' | 'read', key: string) =>
  new Promise<number>((resolve, reject) =>
    store[method](key, (error, result) => (error ? reject(error) : resolve(result!.current)), 60_000, 4),
  );

test(title('both stores keep their threshold when heavyHitters settings hold threshold: undefined'), async (t) => {
  // Settings spread from optional config carry `threshold: undefined`; that must mean "the store's
  // default", not a threshold no client reaches. One row of 8 counters flooded by 200 one-request
  // clients reads high for everyone: only the exact table keeps an innocent client at its count.
  const flood = { capacity: 1000, threshold: undefined };
  const { express, store } = await floodedStores(flood);
  t.is(express.increment('innocent').totalHits, 1);
  t.true(express.topTalkers(10).length > 0, 'clients are counted exactly');
  t.is(firstOverOf(new KeepcountStore({ clock: new ManualClock(), seed: 1n, heavyHitters: flood })), 125);
  t.is(await callStore(store, 'incr', 'innocent'), 1);
});

test(title('both stores read a client a flood raised, but never counted, below its limit'), async (t) => {
  // express-rate-limit's `getKey` reads `get()`, @fastify/rate-limit's `increment: false` reads
  // `read`: one row of 8 counters under 200 one-request clients reads high for everyone, but with
  // room in the table a client never counted has sent nothing that could take it over.
  const { express, store } = await floodedStores({ capacity: 1000 });
  t.true(express.get('innocent').totalHits < 4);
  t.true((await callStore(store, 'read', 'innocent')) < 4);
});

test(title('KeepcountStore refuses each bad option at construction, as keepcountFastifyStore()'), (t) => {
  // Checked in init() alone, a bad option was an error express-rate-limit only logs; every request
  // then failed as "used before init()" (or, with passOnStoreError, went through uncounted).
  for (const [options, instanceOf, code, message] of badStoreOptions) {
    t.throws(() => new KeepcountStore(options as never), { instanceOf, code, message }, inspect(options));
  }
  t.notThrows(() => new KeepcountStore({ cache: 5000 } as never), 'names it does not know are ignored');
});

test(
  title("KeepcountStore remembers what init() refused and every request fails with it, not as 'before init'"),
  async (t) => {
    // express-rate-limit catches what init() throws and only logs it. What only init() can check
    // (here a threshold above express-rate-limit's limit) must then fail each request by its name.
    const logged: unknown[] = [];
    const logger = { error: (error: unknown) => void logged.push(error), warn: () => {} };
    const store = new KeepcountStore({ clock: new ManualClock(), heavyHitters: { threshold: 5 } });
    const app = express();
    app.use(expressRateLimit({ windowMs: 60_000, limit: 2, store, logger }));
    app.get('/', (_req, res) => void res.send('ok'));
    app.use((error: Error & { code?: string }, _req: Request, res: Response, _next: NextFunction) => {
      res.status(500).send(`${error.name} ${error.code}: ${error.message}`);
    });
    const server = createServer(app);
    const port = await listen(server);
    t.teardown(() => close(server));
    const refusal =
      'RangeError ERR_OUT_OF_RANGE: The "threshold" option must be an integer in [1, 2] (express-rate-limit\'s ' +
      'limit). Received 5';
    t.like(logged[0], { name: 'RangeError', code: 'ERR_OUT_OF_RANGE' });
    for (let i = 0; i < 3; i++) t.like(await get(port, '/'), { status: 500, body: refusal });
    t.throws(() => store.get('a'), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message: /threshold/ });
    // A later init() that succeeds counts afresh.
    store.init({ windowMs: 60_000, limit: 5 });
    t.is(store.increment('a').totalHits, 1);
  },
);

test(title("KeepcountStore refuses a heavy-hitter threshold above express-rate-limit's numeric limit"), (t) => {
  // With threshold 50 and limit 10, a client's totalHits read its sketch count up to 49, then its
  // exact count from 1 on: requests 1–10 admitted, then 50–59 too.
  throwsShape(t, () => new KeepcountStore({ heavyHitters: { threshold: 50 } }).init({ windowMs: 1000, limit: 10 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "threshold" option must be an integer in [1, 10] (express-rate-limit\'s limit). Received 50',
  });
  const store = new KeepcountStore({ clock: new ManualClock(), heavyHitters: { threshold: 10 } });
  store.init({ windowMs: 1000, limit: 10 });
  const admitted = [];
  for (let i = 1; i <= 30; i++) if (store.increment('a').totalHits <= 10) admitted.push(i);
  t.deepEqual(
    admitted,
    Array.from({ length: 19 }, (_, i) => i + 1),
    'limit + threshold − 1, then none',
  );
  // A limit function tells the store no number; limit 0 refuses every request whatever the
  // threshold.
  t.notThrows(() => new KeepcountStore({ heavyHitters: { threshold: 50 } }).init({ windowMs: 1000, limit: () => 5 }));
  t.notThrows(() => new KeepcountStore({ heavyHitters: { threshold: 50 } }).init({ windowMs: 1000, limit: 0 }));
});

test(
  title('a limit function answering below a given threshold readmits a client, as README says, without a warning'),
  async (t) => {
    // express-rate-limit asks the function after the store counted and never tells the store its
    // answer, so the store cannot check it (the Fastify store, told each max, warns): README and
    // the heavyHitters doc state this sequence, checked here so that they stay true.
    const warnings: Error[] = [];
    const onWarning = (warning: Error): void =>
      void (warning.name === 'KeepcountWarning' && /threshold/.test(warning.message) && warnings.push(warning));
    process.on('warning', onWarning);
    t.teardown(() => process.off('warning', onWarning));
    const store = new KeepcountStore({ clock: new ManualClock(), heavyHitters: { threshold: 5 } });
    const app = express();
    app.use(expressRateLimit({ windowMs: 60_000, limit: () => 3, store }));
    app.get('/', (_req, res) => void res.send('ok'));
    const server = createServer(app);
    const port = await listen(server);
    t.teardown(() => close(server));
    const statuses = [];
    for (let i = 0; i < 9; i++) statuses.push((await get(port, '/')).status);
    t.deepEqual(statuses, [200, 200, 200, 429, 200, 200, 200, 429, 429], 'requests 1–3 and 5–7');
    await new Promise((resolve) => setImmediate(resolve));
    t.deepEqual(warnings, []);
  },
);

test(title('KeepcountStore refuses a key with no string form by its code, as other keys of the wrong type'), (t) => {
  const store = new KeepcountStore({ clock: new ManualClock() });
  store.init({ windowMs: 1000, limit: 10 });
  for (const key of [Symbol('client'), Object.create(null) as object]) {
    for (const call of [
      () => store.increment(key as never),
      () => store.get(key as never),
      () => store.decrement(key as never),
      () => store.resetKey(key as never),
    ]) {
      t.throws(call, {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /^The "key" argument must be a string or have a string form/,
      });
    }
  }
  t.is(store.increment(5 as never).totalHits, 1, 'a number counts under its string form, as before');
  t.is(store.increment('5').totalHits, 2);
});

test(
  title('KeepcountStore.shutdown() frees its counts; later calls are ERR_KEEPCOUNT_CLOSED, init() starts afresh'),
  (t) => {
    const store = new KeepcountStore({ clock: new ManualClock() });
    store.shutdown();
    store.init({ windowMs: 60_000, limit: 10 } as never);
    t.is(store.increment('a').totalHits, 1);
    store.resetAll();
    t.is(store.increment('a').totalHits, 1);
    store.shutdown();
    store.shutdown();
    t.throws(() => store.increment('a'), { code: 'ERR_KEEPCOUNT_CLOSED' });
    t.throws(() => store.get('a'), { code: 'ERR_KEEPCOUNT_CLOSED' });
    // Not a way back: counting afresh is init()'s.
    t.throws(() => store.resetAll(), { code: 'ERR_KEEPCOUNT_CLOSED' });
    t.throws(() => store.increment('a'), { code: 'ERR_KEEPCOUNT_CLOSED' });
    store.init({ windowMs: 60_000, limit: 10 } as never);
    t.is(store.increment('a').totalHits, 1);
  },
);

test(title('KeepcountStore.get() reads a key counted back to zero as { totalHits: 0 }, as MemoryStore'), async (t) => {
  const clock = new ManualClock();
  const keepcount = new KeepcountStore({ clock });
  const memory = new MemoryStore();
  t.teardown(() => memory.shutdown());
  for (const store of [keepcount, memory]) {
    store.init({ windowMs: 60_000 } as never);
    await store.increment('a');
    await store.decrement('a');
  }
  const ours = keepcount.get('a');
  const theirs = await memory.get('a');
  t.is(theirs?.totalHits, 0);
  t.is(ours.totalHits, 0);
  t.true(ours.resetTime!.getTime() > Date.now() + 59_000);
});

test(
  title('KeepcountStore takes the fractional and zero windowMs MemoryStore takes, and refuses a negative one'),
  async (t) => {
    for (const windowMs of [1500.5, 0]) {
      const clock = new ManualClock();
      const app = express();
      app.use(expressRateLimit({ windowMs, limit: 1, store: new KeepcountStore({ clock }) }));
      app.get('/', (_req, res) => void res.send('ok'));
      const server = createServer(app);
      const port = await listen(server);
      t.teardown(() => close(server));
      t.is((await get(port, '/')).status, 200, `windowMs ${windowMs}: the store initialised`);
      if (windowMs === 0) {
        // MemoryStore starts a new window on every request; here every millisecond does.
        clock.advance(1);
        t.is((await get(port, '/')).status, 200, 'windowMs 0: the next millisecond is a new window');
      } else {
        t.is((await get(port, '/')).status, 429);
        clock.advance(1500);
        t.is((await get(port, '/')).status, 429, 'windowMs 1500.5 counts as 1501 ms');
        clock.advance(1);
        t.is((await get(port, '/')).status, 200);
      }
    }
    t.throws(() => new KeepcountStore().init({ windowMs: -1 }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: 'The "windowMs" option must be a number of milliseconds in [0, 4503599627370496]. Received -1',
    });
  },
);

test.serial(title('KeepcountStore reads Date.now() once per increment, and dates the reset from it'), async (t) => {
  // Serial: Date is faked and Date.now spied on for this test alone.
  mock.timers.enable({ apis: ['Date'], now: 5_000 });
  const fake = Date.now;
  let reads = 0;
  Date.now = () => {
    reads++;
    return fake();
  };
  t.teardown(() => {
    Date.now = fake;
    mock.timers.reset();
  });
  for (const heavyHitters of [true, false]) {
    const store = new KeepcountStore({ heavyHitters });
    store.init({ windowMs: 1000, limit: 1000 });
    mock.timers.tick(250);
    reads = 0;
    const ends = new Set<number>();
    for (let i = 1; i <= 20; i++) {
      const info = await store.increment('client');
      t.is(info.totalHits, i);
      ends.add(info.resetTime!.getTime());
    }
    t.is(reads, 20, `heavyHitters: ${heavyHitters}`);
    // Time stands still: one window end, within a window of now (5,250 ms).
    t.is(ends.size, 1);
    const [end] = ends;
    t.true(end! > 5_250 && end! <= 6_250, `resetTime ${end}`);
  }
});

test.serial(
  title("KeepcountStore on a clock of its own dates the reset no later than the window's end by Date.now()"),
  async (t) => {
    // The quota counts on its clock's milliseconds (a `rate`'s monotonic one, here a ManualClock),
    // out of step with Date.now()'s: 0.9 ms into one of the quota's, 0.1 ms into one of Date's.
    // Serial: Date is faked for this test alone.
    mock.timers.enable({ apis: ['Date'], now: 5_000 });
    t.teardown(() => mock.timers.reset());
    const clock = new ManualClock();
    const store = new KeepcountStore({ clock });
    store.init({ windowMs: 20, limit: 10 });
    clock.advance(10.9);
    const { resetTime } = await store.increment('a');
    // 9.1 ms later the quota's window has ended, and Date.now(), 9.2 ms past 5,000, reads 5,009.
    clock.advance(9.1);
    mock.timers.tick(9);
    t.is(store.get('a').totalHits, 0, 'a new window');
    // express-rate-limit takes back a request only while Date.now() < resetTime: with 5,010, a
    // refund of the last window's request took one of the new window's.
    t.true(Date.now() >= resetTime!.getTime(), `resetTime ${resetTime!.getTime()} at Date.now() ${Date.now()}`);
  },
);

test.serial(
  title('the shared window: at most 2 × (limit + threshold − 1) in any windowMs span, a first window as short as 1 ms'),
  async (t) => {
    // Measures the worst case the shared window has and per-key windows (MemoryStore) do not, on
    // the same fake Date, with a real limit: its default heavy-hitter threshold, ceil(100 / 4) =
    // 25, lets a window admit up to limit + threshold − 1 = 124 (the requests before a client
    // enters the exact table are read from the sketch). Serial: ava runs serial tests first, so
    // no other test sees the fake Date.
    const limit = 100;
    const threshold = 25;
    const perWindow = limit + threshold - 1;
    const windowMs = 1000;
    mock.timers.enable({ apis: ['Date'], now: 0 });
    t.teardown(() => mock.timers.reset());
    /** Sends `n` requests for `key` now; returns how many were admitted (totalHits <= limit). */
    const send = async (store: KeepcountStore | MemoryStore, key: string, n: number) => {
      let admitted = 0;
      for (let i = 0; i < n; i++) if ((await store.increment(key)).totalHits <= limit) admitted++;
      return admitted;
    };
    const keepcount = new KeepcountStore();
    const memory = new MemoryStore();
    t.teardown(() => memory.shutdown());
    keepcount.init({ windowMs, limit });
    memory.init({ windowMs, limit } as never);

    // Someone else started the shared window at 0; a new client arrives at 999 ms. Exact figures,
    // so that a window admitting one request more fails here.
    await send(keepcount, 'someone', 1);
    mock.timers.tick(windowMs - 1);
    const first = await send(keepcount, 'new', 2 * limit);
    mock.timers.tick(1);
    const second = await send(keepcount, 'new', 2 * limit);
    t.is(first, perWindow, 'keepcount: limit + threshold − 1 in a window');
    t.is(first + second, 2 * perWindow, 'keepcount: 2 × (limit + threshold − 1) within 1 ms of a new client');

    // MemoryStore: the client's window starts at its own first request; the same burst needs a
    // full window first and reaches 2 × limit − 1.
    const start = Date.now();
    const opening = await send(memory, 'new', 1);
    mock.timers.tick(windowMs - 1);
    const late = await send(memory, 'new', 2 * limit);
    mock.timers.tick(1);
    const next = await send(memory, 'new', 2 * limit);
    t.is(opening, 1);
    t.is(late + next, 2 * limit - 1, 'MemoryStore: 2 × limit − 1 within 1 ms, after a full window');
    t.is(Date.now() - start, windowMs);

    // Any span of windowMs, random bursts over some 30 windows (seed 12): never more than
    // 2 × (limit + threshold − 1), with bursts of up to 39 requests every 0–99 ms, which pass the
    // limit in every window.
    const random = prng(12);
    const admittedAt: number[] = [];
    const store = new KeepcountStore();
    store.init({ windowMs, limit });
    for (let i = 0; i < 600; i++) {
      mock.timers.tick(Math.floor(random() * 100));
      const admitted = await send(store, 'client', Math.floor(random() * 40));
      for (let j = 0; j < admitted; j++) admittedAt.push(Date.now());
    }
    let worst = 0;
    for (let i = 0, j = 0; i < admittedAt.length; i++) {
      while (admittedAt[i]! - admittedAt[j]! >= windowMs) j++;
      worst = Math.max(worst, i - j + 1);
    }
    t.log(`most admitted in any ${windowMs} ms span: ${worst} (limit ${limit}, threshold ${threshold})`);
    t.true(worst <= 2 * perWindow);
  },
);

test(title('express-rate-limit skipFailedRequests decrements through the store'), async (t) => {
  const clock = new ManualClock();
  // Counts decrements, so the test waits for them rather than for a guessed time.
  const store = new (class extends KeepcountStore {
    decrements = 0;
    override decrement(key: string): void {
      this.decrements++;
      super.decrement(key);
    }
  })({ clock });
  const limiter = expressRateLimit({ windowMs: 1000, limit: 1, skipFailedRequests: true, store });
  const app = express();
  app.use(limiter);
  app.get('/fail', (_req, res) => void res.status(500).end());
  app.get('/', (_req, res) => void res.send('ok'));
  const server = createServer(app);
  const port = await listen(server);
  t.teardown(() => close(server));
  for (let i = 0; i < 3; i++) t.is((await get(port, '/fail')).status, 500);
  // express-rate-limit decrements when the failed response finishes, after the client has it.
  t.true(await eventually(() => store.decrements === 3), 'three failed requests taken back');
  t.is((await get(port, '/')).status, 200, 'failed requests were taken back');
  t.is((await get(port, '/')).status, 429);
});
