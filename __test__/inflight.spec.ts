import test from 'ava';
import { Estimator, HeavyHitters, Inflight, Limiter, ManualClock, Rate, type InflightGuard } from '../lib/index.js';
import { runFixture, throwsShape, title } from './helpers.js';

test(title('counts in and out per key (pingora inflight_count)'), (t) => {
  const inflight = new Inflight({ seed: 1n });
  const [g1, v1] = inflight.incr('a', 1);
  t.is(v1, 1);
  const [g2, v2] = inflight.incr('a', 2);
  t.is(v2, 3);
  g1.release();
  t.is(g2.get(), 2);
  g2.release();
  const [g3, v3] = inflight.incr('a');
  t.is(v3, 1);
  g3.release();
  t.is(inflight.get('a'), 0);
});

test(title('guards add their value again with incr() and give everything back once'), (t) => {
  const inflight = new Inflight({ hashes: 2, slots: 64, seed: 2n });
  const [guard] = inflight.incr(7, 3);
  t.is(guard.incr(), 6);
  t.is(guard.incr(), 9);
  t.is(inflight.get(7n), 9);
  t.false(guard.released);
  guard.release();
  t.true(guard.released);
  t.is(inflight.get(7), 0);
  guard.release();
  guard[Symbol.dispose]();
  t.is(inflight.get(7), 0);
  throwsShape(t, () => guard.incr(), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_RELEASED',
    message: 'Cannot incr() a released Inflight guard',
  });
  t.is(guard.get(), 0);
});

test(title('a guard whose total passes 2^53 gives back exactly what it added'), (t) => {
  const inflight = new Inflight({ hashes: 2, slots: 64, seed: 6n });
  inflight.incr('other', 5);
  const [guard, first] = inflight.incr('k', 2 ** 52);
  t.is(first, 2 ** 52);
  guard.incr();
  t.is(guard.incr(), 3 * 2 ** 52);
  guard.release();
  t.true(guard.released);
  t.is(inflight.get('k'), 0);
  t.is(inflight.get('other'), 5);
  const [negative] = inflight.incr('n', -Number.MAX_SAFE_INTEGER);
  negative.incr();
  t.is(negative.get(), -2 * Number.MAX_SAFE_INTEGER);
  negative.release();
  t.is(inflight.get('n'), 0);
});

test(title('`using` releases the guard at the end of the block'), (t) => {
  const inflight = new Inflight({ seed: 3n });
  {
    using guard = inflight.incr('k', 4)[0];
    t.is(guard.get(), 4);
    t.is(inflight.get('k'), 4);
  }
  t.is(inflight.get('k'), 0);
});

test(title('guards keep their own copy of byte keys'), (t) => {
  const inflight = new Inflight({ seed: 4n });
  const key = Buffer.from('abc');
  const [guard] = inflight.incr(key);
  key[0] = 0x78;
  guard.release();
  t.is(inflight.get(Buffer.from('abc')), 0);
  t.is(inflight.get(key), 0);
});

test(title('a guard collected without release gives its count back (FinalizationRegistry)'), async (t) => {
  const child = await runFixture('gc-guard.ts', { nodeArgs: ['--expose-gc'] });
  t.is(child.code, 0, child.stderr);
  t.deepEqual(JSON.parse(child.stdout), {
    before: [5, 6, 3 * 2 ** 52],
    after: [0, 0, 0],
    kept: 2,
    closedCollected: true,
  });
});

test(title('refuses bad options, keys and values'), (t) => {
  throwsShape(t, () => new Inflight({ hashes: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "hashes" option must be an integer in [1, 32]. Received 0',
  });
  const inflight = new Inflight();
  throwsShape(t, () => inflight.incr({} as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "key" argument must be of type string, number, bigint or Uint8Array. Received an instance of Object',
  });
  throwsShape(t, () => inflight.incr('k', Infinity), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "value" argument must be a safe integer. Received Infinity',
  });
  t.is(inflight.get('k'), 0);
});

test(title('defaults to 4 hashes × 8192 slots like pingora'), (t) => {
  // Distinct keys do not disturb each other's counts in a default-sized sketch.
  const inflight = new Inflight({ seed: 5n });
  const guards: InflightGuard[] = [];
  for (let i = 0; i < 1000; i++) guards.push(inflight.incr(i)[0]);
  for (let i = 0; i < 1000; i++) t.is(inflight.get(i), 1);
  for (const g of guards) g.release();
  for (let i = 0; i < 1000; i++) t.is(inflight.get(i), 0);
});

test(title('a key on a detached buffer is the empty key, for Inflight as for every class'), (t) => {
  const detached = new Uint8Array(new ArrayBuffer(8));
  structuredClone(detached.buffer, { transfer: [detached.buffer] });
  const inflight = new Inflight({ seed: 7n });
  const [guard, count] = inflight.incr(detached);
  t.is(count, 1);
  t.is(inflight.get(new Uint8Array(0)), 1);
  guard.release();
  t.is(inflight.get(new Uint8Array(0)), 0);
  const estimator = new Estimator({ seed: 7n });
  t.is(estimator.incr(detached), 1);
  t.is(estimator.get(new Uint8Array(0)), 1);
  const rate = new Rate({ intervalMs: 1000, seed: 7n, clock: new ManualClock() });
  t.is(rate.observe(detached, 2), 2);
  t.is(rate.observe(new Uint8Array(0), 1), 3);
  const limiter = new Limiter({ bestEffort: { requests: { amount: 1, periodMs: 60_000, burst: 1 } } });
  t.true(limiter.check(detached).allowed);
  const heavy = new HeavyHitters({ intervalMs: 1000, threshold: 1, seed: 7n, clock: new ManualClock() });
  t.is(heavy.incr(detached), 1);
  t.is(heavy.incrWindow(detached).count, 2);
  heavy.decr(detached);
  t.deepEqual(heavy.count(new Uint8Array(0)), { lower: 1, upper: 1, standing: 'tracked' });
});

test(title('enter and leave count in and out without a guard, alongside guards on the same keys'), (t) => {
  const inflight = new Inflight({ seed: 3n });
  t.is(inflight.enter('a'), 1);
  t.is(inflight.enter('a', 2), 3);
  const [guard, count] = inflight.incr('a');
  t.is(count, 4);
  inflight.leave('a', 2);
  t.is(inflight.get('a'), 2);
  guard.release();
  inflight.leave('a');
  t.is(inflight.get('a'), 0);
  t.is(inflight.enter(new Uint8Array([1, 2])), 1);
  inflight.leave(Buffer.from([1, 2]));
  t.is(inflight.get(new Uint8Array([1, 2])), 0);
  t.is(inflight.enter(9n, 0), 0);
  inflight.leave(9, 0);
  t.is(inflight.get(9), 0);
});

test(title('enter and leave refuse bad keys and values before counting anything'), (t) => {
  const inflight = new Inflight();
  for (const call of [() => inflight.enter(null as never), () => inflight.leave(null as never)]) {
    throwsShape(t, call, {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "key" argument must be of type string, number, bigint or Uint8Array. Received null',
    });
  }
  for (const call of [() => inflight.enter('k', 1.5), () => inflight.leave('k', 1.5)]) {
    throwsShape(t, call, {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: 'The "value" argument must be a safe integer. Received 1.5',
    });
  }
  throwsShape(t, () => inflight.leave('k', '1' as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "value" argument must be of type number. Received type string ("1")',
  });
  t.is(inflight.get('k'), 0);
});
