// close() and `using`: an Estimator, Rate or Inflight frees its counters at once and refuses every
// later call with ERR_KEEPCOUNT_CLOSED (memory.spec.ts measures what closing saves).
import test from 'ava';
import { Estimator, HeavyHitters, Inflight, Limiter, ManualClock, Rate, type InflightGuard } from '../lib/index.js';
import { throwsShape, title } from './helpers.js';

const closed = (what: string) => ({
  instanceOf: Error,
  code: 'ERR_KEEPCOUNT_CLOSED',
  message: `This ${what} was closed; its counters are gone`,
});

test(title('a closed Estimator refuses every call but keeps its shape'), (t) => {
  const e = new Estimator({ hashes: 3, slots: 100, seed: 7n });
  e.incr('a', 2);
  e.close();
  e.close();
  t.deepEqual([e.hashes, e.slots, e.seed, e.byteLength], [3, 100, 7n, 28 + 8 * 300]);
  for (const call of [
    () => e.incr('a'),
    () => e.decr('a'),
    () => e.get('a'),
    () => e.counterIndexes('a'),
    () => e.reset(),
    () => e.serialize(),
    () => e.merge(new Estimator({ hashes: 3, slots: 100, seed: 7n })),
  ]) {
    throwsShape(t, call, closed('Estimator'));
  }
});

test(title('a closed Inflight refuses every call; its guards release as no-ops'), (t) => {
  const inflight = new Inflight({ seed: 5n });
  const [guard] = inflight.incr('a', 2);
  const [other] = inflight.incr('b');
  other.release();
  inflight.enter('a');
  inflight.close();
  inflight.close();
  for (const call of [
    () => inflight.incr('a'),
    () => inflight.enter('a'),
    () => inflight.get('a'),
    () => guard.get(),
    () => guard.incr(),
  ]) {
    throwsShape(t, call, closed('Inflight'));
  }
  // What enter() added went with the close: leave() gives nothing back, and still checks its arguments.
  t.notThrows(() => inflight.leave('a'));
  throwsShape(t, () => inflight.leave('a', 0.5), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "value" argument must be a safe integer. Received 0.5',
  });
  t.false(guard.released);
  t.notThrows(() => guard.release());
  t.true(guard.released);
  t.notThrows(() => other.release());
  let late: InflightGuard;
  {
    using scoped = new Inflight({ seed: 5n });
    late = scoped.incr('a')[0];
    t.is(scoped.get('a'), 1);
  }
  // Released after the block closed its Inflight: nothing to give back.
  throwsShape(t, () => late.get(), closed('Inflight'));
  t.notThrows(() => late.release());
});

test(title('a closed Limiter refuses every call but keeps its quotas'), (t) => {
  const quota = { requests: { perSecond: 1, burst: 2 } };
  const limiter = new Limiter({ bestEffort: quota, overall: quota, keys: [['a', quota]] });
  t.true(limiter.check('a').allowed);
  limiter.close();
  limiter.close();
  for (const call of [
    () => limiter.check('a'),
    () => limiter.replaceKeys([['b', quota]]),
    () => limiter.setQuota('a', quota),
    () => limiter.setBestEffort(quota),
    () => limiter.setOverall(undefined),
    () => limiter.quota('a'),
    () => limiter.size,
  ]) {
    throwsShape(t, call, closed('Limiter'));
  }
  t.deepEqual(limiter.bestEffort, new Limiter({ bestEffort: quota }).bestEffort);
  t.not(limiter.overall, undefined);
  let scoped: Limiter;
  {
    using inBlock = new Limiter({ bestEffort: quota });
    scoped = inBlock;
    t.true(scoped.check('k').allowed);
  }
  throwsShape(t, () => scoped.check('k'), closed('Limiter'));
});

test(title('merging a closed Estimator into an open one is refused, the open one untouched'), (t) => {
  const open = new Estimator({ hashes: 2, slots: 8, seed: 1n });
  open.incr('x', 5);
  const gone = new Estimator({ hashes: 2, slots: 8, seed: 1n });
  gone.close();
  throwsShape(t, () => open.merge(gone), closed('Estimator'));
  t.is(open.get('x'), 5);
  // Closed comes before mismatched, either way round (it was ERR_KEEPCOUNT_MISMATCH).
  const other = new Estimator({ hashes: 2, slots: 8, seed: 2n });
  throwsShape(t, () => gone.merge(other), closed('Estimator'));
  throwsShape(t, () => other.merge(gone), closed('Estimator'));
});

test(title('a deserialized Estimator closes too'), (t) => {
  const e = Estimator.deserialize(new Estimator({ seed: 3n }).serialize());
  e.close();
  throwsShape(t, () => e.get('a'), closed('Estimator'));
});

test(title('a closed Rate refuses every call'), (t) => {
  const r = new Rate({ intervalMs: 1000, clock: new ManualClock() });
  r.observe('a');
  r.close();
  r.close();
  t.is(r.intervalMs, 1000);
  for (const call of [
    () => r.observe('a'),
    () => r.observeWindow('a'),
    () => r.rate('a'),
    () => r.rateWith('a', (c) => c.currSamples),
  ]) {
    throwsShape(t, call, closed('Rate'));
  }
});

test(
  title('a clock that closes its Rate, HeavyHitters or Limiter mid-call gets ERR_KEEPCOUNT_CLOSED from that call'),
  (t) => {
    /** A clock whose next reading closes `target` first. */
    const closing = () => {
      let target: { close(): void } | undefined;
      let ms = 0;
      return {
        clock: { now: () => (target?.close(), ms++) },
        arm(on: { close(): void }) {
          target = on;
        },
      };
    };
    const other = new HeavyHitters({ intervalMs: 10, threshold: 1, seed: 1n }).serialize();
    const rateCalls: ((r: Rate) => unknown)[] = [
      (r) => r.observe('k'),
      (r) => r.observeWindow('k'),
      (r) => r.rate('k'),
      (r) => r.rateWith('k', (c) => c),
    ];
    const heavyCalls: ((h: HeavyHitters) => unknown)[] = [
      (h) => h.incr('k'),
      (h) => h.incrWindow('k'),
      (h) => h.decr('k'),
      (h) => h.count('k'),
      (h) => h.top(5),
      (h) => h.stats(),
      (h) => h.serialize(),
      (h) => h.merge(other),
      (h) => h.intervalRemainingMs(),
    ];
    const quota = { requests: { perSecond: 1000, burst: 1000 } };
    const limiterCalls: ((l: Limiter) => unknown)[] = [
      (l) => l.check('k'),
      (l) => l.setQuota('k', quota),
      (l) => l.replaceKeys([['k', quota]]),
      (l) => l.setBestEffort(quota),
      (l) => l.setOverall(quota),
    ];
    const calls = [
      ...rateCalls.map((call) => ['Rate', call] as const),
      ...heavyCalls.map((call) => ['HeavyHitters', call] as const),
      ...limiterCalls.map((call) => ['Limiter', call] as const),
    ];
    const make = (what: 'Rate' | 'HeavyHitters' | 'Limiter', clock: { now(): number }) => {
      if (what === 'Rate') return new Rate({ intervalMs: 10, seed: 1n, clock });
      if (what === 'HeavyHitters') return new HeavyHitters({ intervalMs: 10, threshold: 1, seed: 1n, clock });
      return new Limiter({ bestEffort: quota, keys: [['k', quota]], clock });
    };
    for (const [what, call] of calls) {
      const { clock, arm } = closing();
      const x = make(what, clock);
      call(x as never);
      arm(x);
      // Before, native took the call to the freed core (ERR_KEEPCOUNT_INTERNAL or a "live handle"
      // TypeError) and the fallback counted into the closed object.
      throwsShape(t, () => call(x as never), closed(what));
    }
  },
);

test(title('`using` closes both at the end of the block'), (t) => {
  let escapedEstimator: Estimator | undefined;
  let escapedRate: Rate | undefined;
  {
    using e = new Estimator();
    using r = new Rate({ intervalMs: 1000 });
    e.incr('k');
    r.observe('k');
    escapedEstimator = e;
    escapedRate = r;
  }
  throwsShape(t, () => escapedEstimator!.get('k'), closed('Estimator'));
  throwsShape(t, () => escapedRate!.observe('k'), closed('Rate'));
});

test(title('other sketches keep working after one closes'), (t) => {
  const a = new Estimator({ seed: 1n });
  const b = new Estimator({ seed: 1n });
  a.incr('k', 3);
  b.incr('k', 4);
  a.close();
  const c = new Estimator({ seed: 1n });
  c.incr('k', 1);
  t.is(b.get('k'), 4);
  t.is(c.get('k'), 1);
});
