import test from 'ava';
import { backend, ManualClock, proportionalRate, Rate, type RateComponents } from '../lib/index.js';
import { hrtimeCalls, throwsShape, title } from './helpers.js';
import { hostClockPassed } from './waits.js';

const setup = () => {
  const clock = new ManualClock();
  return { clock, rate: new Rate({ intervalMs: 1000, clock, seed: 1n }) };
};

test(title('observes counts per interval and reports the last completed one (pingora test_observe_rate)'), (t) => {
  const { clock, rate } = setup();
  t.is(rate.observe(1, 3), 3);
  t.is(rate.observe(1, 2), 5);
  t.is(rate.rate(1), 0);
  clock.advance(1000);
  t.is(rate.observe(1, 4), 4);
  t.is(rate.rate(1), 5);
  clock.advance(1000);
  t.is(rate.rate(1), 4);
  clock.advance(1000);
  t.is(rate.rate(1), 0);
});

test(title('reads 0 after two missed intervals and measures intervals from the last reset'), (t) => {
  const { clock, rate } = setup();
  rate.observe('k', 10);
  clock.advance(2000);
  t.is(rate.rate('k'), 0);
  t.deepEqual(
    rate.rateWith('k', (c) => [c.prevSamples, c.currSamples]),
    [0, 0],
  );
  t.is(rate.observe('k'), 1);
  clock.advance(1500); // the reset above happened at 2000: an interval has passed at 3000
  t.is(rate.rate('k'), 1);
  t.is(rate.rate(1), 0);
});

test(title('rateWith passes the 90/10 components (pingora test_observe_rate_custom_90_10)'), (t) => {
  const { clock, rate } = setup();
  const fn = (c: RateComponents) => (c.prevSamples * 0.1 + c.currSamples * 0.9) / (c.intervalMs / 1000);
  t.is(rate.observe(1, 3), 3);
  t.is(rate.observe(1, 2), 5);
  t.is(rate.rateWith(1, fn), 5 * 0.9);
  clock.advance(1000);
  t.is(rate.observe(1, 4), 4);
  t.is(rate.rateWith(1, fn), 5 * 0.1 + 4 * 0.9);
  clock.advance(1000);
  t.is(rate.rateWith(1, fn), 4 * 0.1);
  clock.advance(1000);
  t.is(rate.rateWith(1, fn), 0);
});

test(title('proportionalRate interpolates between intervals (pingora test_observe_rate_custom_proportional)'), (t) => {
  const { clock, rate } = setup();
  t.is(rate.observe(1, 3), 3);
  t.is(rate.observe(1, 2), 5);
  t.is(rate.rateWith(1, proportionalRate), 5);
  clock.advance(500);
  t.is(rate.rateWith(1, proportionalRate), 5);
  t.is(rate.rate(1), 0);
  clock.advance(500);
  t.is(rate.observe(1, 4), 4);
  t.is(rate.rateWith(1, proportionalRate), 9);
  clock.advance(750);
  t.is(rate.rateWith(1, proportionalRate), 5 * 0.25 + 4);
  clock.advance(250);
  t.is(rate.rateWith(1, proportionalRate), 4);
  t.is(rate.rate(1), 4);
  clock.advance(500);
  t.is(rate.rateWith(1, proportionalRate), 4 / 2);
  t.is(rate.rate(1), 4);
  clock.advance(1000);
  t.is(rate.rateWith(1, proportionalRate), 0);
});

test(title('rateWith reports the interval and the elapsed fraction'), (t) => {
  const clock = new ManualClock(123.4);
  const rate = new Rate({ intervalMs: 200, clock, hashes: 2, slots: 16, seed: 5 });
  rate.observe('x', 7);
  clock.advance(50.9);
  t.deepEqual(
    rate.rateWith('x', (c) => c),
    { prevSamples: 0, currSamples: 7, intervalMs: 200, currentIntervalFraction: 50 / 200 },
  );
  t.is(rate.intervalMs, 200);
  t.is(proportionalRate({ prevSamples: 10, currSamples: 4, intervalMs: 2000, currentIntervalFraction: 0.25 }), 5.75);
});

test(title('treats a clock going backwards as no time passing'), (t) => {
  let now = 5000;
  const rate = new Rate({ intervalMs: 100, clock: { now: () => now }, seed: 1n });
  rate.observe('k', 2);
  now = 0;
  t.is(rate.observe('k', 1), 3);
  t.is(rate.rate('k'), 0);
  now = 5100;
  t.is(rate.rate('k'), 30);
});

test(title('works on the default monotonic clock'), (t) => {
  const rate = new Rate({ intervalMs: 60_000 });
  t.is(rate.observe('a'), 1);
  t.is(rate.observe('a', 2), 3);
  t.is(rate.rate('a'), 0);
});

test(title('without a clock, intervals turn on the host clock, which the native core reads itself'), async (t) => {
  const rate = new Rate({ intervalMs: 100 });
  const made = process.hrtime.bigint();
  const first = rate.observeWindow('a');
  t.is(first.count, 1);
  t.true(first.resetMs >= 1 && first.resetMs <= 100, `resetMs ${first.resetMs}`);
  await hostClockPassed(made, 150);
  // At least one interval later: this call starts the next interval, so all of it is left.
  t.deepEqual(rate.observeWindow('a'), { count: 1, resetMs: 100 });
  // Counting on the host clock takes no clock call from JavaScript on the native backend; the
  // fallback's core reads process.hrtime() itself, once per call.
  const calls = hrtimeCalls(() => {
    for (let i = 0; i < 10; i++) rate.observe('a');
  });
  t.is(calls, backend === 'native' ? 0 : 10);
});

test(title('refuses bad options, events, functions and clock readings'), (t) => {
  const range = { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' };
  const type = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' };
  for (const intervalMs of [0, -1, 1.5, NaN, 2 ** 53]) {
    throwsShape(t, () => new Rate({ intervalMs }), {
      ...range,
      message: `The "intervalMs" option must be an integer in [1, 4503599627370496]. Received ${intervalMs}`,
    });
  }
  throwsShape(t, () => new Rate({} as never), {
    ...type,
    message: 'The "intervalMs" option must be of type number. Received undefined',
  });
  throwsShape(t, () => new Rate(undefined as never), {
    ...type,
    message: 'The "intervalMs" option must be of type number. Received undefined',
  });
  throwsShape(t, () => new Rate({ intervalMs: 10, slots: 0 }), {
    ...range,
    message: 'The "slots" option must be an integer in [1, 134217728]. Received 0',
  });
  throwsShape(t, () => new Rate({ intervalMs: 10, clock: Date as never }), {
    ...type,
    message: 'The "clock" option must be an object with a now() method. Received function Date',
  });
  throwsShape(t, () => new Rate({ intervalMs: 10, clock: { now: () => NaN } }), {
    ...range,
    message: "The clock's now() must be a finite number of milliseconds. Received NaN",
  });
  const rate = new Rate({ intervalMs: 10, clock: new ManualClock() });
  throwsShape(t, () => rate.observe('k', 0.5), {
    ...range,
    message: 'The "events" argument must be a safe integer. Received 0.5',
  });
  throwsShape(t, () => rate.rate(false as never), {
    ...type,
    message: 'The "key" argument must be of type string, number, bigint or Uint8Array. Received type boolean (false)',
  });
  throwsShape(t, () => rate.rateWith('k', 5 as never), {
    ...type,
    message: 'The "fn" argument must be of type function. Received 5',
  });
});

test(title('ManualClock starts where told and only moves forward'), (t) => {
  const clock = new ManualClock(10);
  t.is(clock.now(), 10);
  clock.advance(2.5);
  t.is(clock.now(), 12.5);
  t.is(new ManualClock().now(), 0);
  for (const ms of [-1, NaN, Infinity]) {
    throwsShape(t, () => clock.advance(ms), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: `The "ms" argument must be a number of milliseconds in [0, 9007199254740991]. Received ${ms}`,
    });
  }
  throwsShape(t, () => new ManualClock('0' as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "startMs" argument must be of type number. Received type string ("0")',
  });
});

test(title('a custom clock past 2^53 ms saturates there on both backends'), (t) => {
  let now = 0;
  const rate = new Rate({ intervalMs: 1000, seed: 2n, clock: { now: () => now } });
  t.is(rate.observe('k'), 1);
  now = 2 ** 60;
  t.is(rate.observe('k'), 1);
  t.is(rate.rate('k'), 0);
  now = 2 ** 61;
  // Time stopped at 2^53 − 1 ms: still the same interval.
  t.is(rate.observe('k'), 2);
});

test(title('observeWindow counts as observe does and tells the milliseconds left in the interval'), (t) => {
  const { clock, rate } = setup();
  clock.advance(250);
  t.deepEqual(rate.observeWindow('k', 3), { count: 3, resetMs: 750 });
  t.is(rate.observe('k'), 4);
  clock.advance(749);
  t.deepEqual(rate.observeWindow('k'), { count: 5, resetMs: 1 });
  // 1,250 ms after the interval began at 0: this call ends it and starts the next one now.
  clock.advance(251);
  t.deepEqual(rate.observeWindow('k'), { count: 1, resetMs: 1000 });
  t.is(rate.rate('k'), 5);
  clock.advance(2500);
  t.deepEqual(rate.observeWindow(7n, 2), { count: 2, resetMs: 1000 });
  t.is(rate.rate('k'), 0);
  throwsShape(t, () => rate.observeWindow('k', 1.5), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "events" argument must be a safe integer. Received 1.5',
  });
  throwsShape(t, () => rate.observeWindow(null as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "key" argument must be of type string, number, bigint or Uint8Array. Received null',
  });
});

test(title('refund takes back counts in the current interval, stopping each counter at zero'), (t) => {
  // Over a SharedArrayBuffer too: the stores' resetKey and decrement refund there, and two racing
  // refunds of one count must not take it below zero (sab.spec.ts races them across threads).
  const clock = new ManualClock();
  const heap = new Rate({ intervalMs: 1000, clock, seed: 1n });
  const buffer = Rate.fromSharedBuffer(Rate.createSharedBuffer({ intervalMs: 1000, seed: 1n }), { clock });
  for (const [name, rate] of [
    ['heap', heap],
    ['buffer', buffer],
  ] as const) {
    rate.observe('k', 5);
    t.is(rate.refund('k', 3), 2, name);
    t.is(rate.refund('k', 10), 0, `${name}: stops at zero`);
    t.is(rate.refund('k'), 0, `${name}: nothing left to take back`);
    t.is(rate.observe('k'), 1, `${name}: no negative count left behind`);
    t.is(rate.refund('k', 0), 1, `${name}: a refund of 0 changes nothing`);
    // A count taken below zero by a negative observe is left as it is: a refund only lowers.
    t.is(rate.observe('below', -4), -4);
    t.is(rate.refund('below', 2), -4, name);
    t.is(rate.refund('never'), 0);
    // The previous interval is not the refund's.
    rate.observe('p', 7);
    clock.advance(1000);
    t.is(rate.refund('p', 7), 0);
    t.is(rate.rate('p'), 7, `${name}: the completed interval keeps its count`);
    clock.advance(5000);
  }
  // Keys sharing a counter: one row of one counter holds both. The refund stops the counter at
  // zero, so `b` reads 0 too until the interval turns (never below).
  const tiny = new Rate({ intervalMs: 1000, clock, hashes: 1, slots: 1, seed: 2n });
  tiny.observe('a', 5);
  tiny.observe('b', 3);
  t.is(tiny.refund('a', 5), 3);
  t.is(tiny.refund('a', 5), 0);
  t.is(
    tiny.rateWith('b', (c) => c.currSamples),
    0,
  );
});

test(title('refund refuses what observe refuses, and a negative or fractional count of events'), (t) => {
  const { rate } = setup();
  throwsShape(t, () => rate.refund('k', -1), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "events" argument must be a safe integer >= 0. Received -1',
  });
  for (const events of [1.5, 2 ** 53, Number.NaN]) {
    t.throws(() => rate.refund('k', events), { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' });
  }
  throwsShape(t, () => rate.refund('k', '1' as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "events" argument must be of type number. Received type string ("1")',
  });
  t.throws(() => rate.refund({} as never), { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' });
  rate.close();
  t.throws(() => rate.refund('k'), { code: 'ERR_KEEPCOUNT_CLOSED' });
});
