import test, { type ExecutionContext } from 'ava';
import { mock } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { backend, HeavyHitters, Rate } from '../lib/index.js';
import { dateClock, READ_WALL_CLOCK } from '../lib/clock.js';
import type { Backend } from '../lib/core.js';
import { keepcountFastifyStore } from '../lib/http/index.js';
import { backend as nativeBackend } from '../lib/native.cjs';
import { fallbackBackend } from '../fallback/index.js';
import { prng, runFixture, throwsShape, title } from './helpers.js';

/** A window no test outlives: readings show in `resetMs` as `WINDOW − elapsed`. */
const WINDOW = 1e9;

/** The two structures that take `dateClock`, each counting one key and answering `resetMs`. */
const counters = {
  Rate: () => {
    const rate = new Rate({ intervalMs: WINDOW, seed: 1n, clock: dateClock });
    return () => rate.observeWindow('k').resetMs;
  },
  HeavyHitters: () => {
    const heavy = new HeavyHitters({ intervalMs: WINDOW, seed: 1n, threshold: 1, capacity: 4, clock: dateClock });
    return () => heavy.incrWindow('k').resetMs;
  },
};

/**
 * Reads `resetMs` between two `Date.now()` readings and asserts the elapsed time it shows lies
 * between them, less the latest and the earliest origin the reading may count from.
 */
function assertWallReading(t: ExecutionContext, resetMs: () => number, earliest: number, latest: number): void {
  const lo = Date.now();
  const elapsed = WINDOW - resetMs();
  const hi = Date.now();
  t.true(
    elapsed >= lo - latest && elapsed <= hi - earliest,
    `elapsed ${elapsed} not in [${lo - latest}, ${hi - earliest}]`,
  );
  t.true(Number.isInteger(elapsed));
}

for (const [name, make] of Object.entries(counters)) {
  test.serial(title(`${name} on dateClock counts whole ms of Date.now() from its construction`), async (t) => {
    // Serial: no fake Date from another test. The core reads the wall clock itself here; its
    // reading must lie between the Date.now() readings around construction and around the call.
    const before = Date.now();
    const resetMs = make();
    const after = Date.now();
    await sleep(30);
    assertWallReading(t, resetMs, before, after);
  });

  test.serial(
    title(`${name} on dateClock reads a Date.now faked after construction, and the engine's behind it as no time`),
    async (t) => {
      const origin = Date.now();
      mock.timers.enable({ apis: ['Date'], now: origin });
      let resetMs;
      try {
        resetMs = make();
        mock.timers.tick(5000);
        t.is(resetMs(), WINDOW - 5000, 'the fake is read');
      } finally {
        mock.timers.reset();
      }
      // The engine's Date.now again, read by the core itself on the native backend: a few ms past
      // the origin, behind the fake's 5,000, so a step back, which counts as no time passing.
      const before = Date.now();
      t.is(resetMs(), WINDOW - 5000, "the engine's clock behind the fake");
      const after = Date.now();
      // And time counts again from that reading at once.
      await sleep(30);
      const lo = Date.now();
      const since = WINDOW - 5000 - resetMs();
      const hi = Date.now();
      t.true(since >= lo - after && since <= hi - before, `${since} ms not in [${lo - after}, ${hi - before}]`);
    },
  );
}

/** A wall reading's core of each backend, made with the origin `originMs` and a window of `intervalMs`. */
const wallCores = {
  Rate: (b: Backend, intervalMs: number, originMs: number) => {
    const core = new b.Rate(intervalMs, 2, 64, 1n, false, originMs);
    return (nowMs: number, window: Float64Array) => core.observeInWindow('k', 1, nowMs, window);
  },
  HeavyHitters: (b: Backend, intervalMs: number, originMs: number) => {
    const core = new b.Heavy(intervalMs, 2, 64, 1n, 1, 4, false, originMs);
    return (nowMs: number, window: Float64Array) => core.incrInWindow('k', 1, nowMs, window);
  },
};

/**
 * What a core given `readings` counts: the sum of the rises from each reading to the next (from 0,
 * the origin's), at most 2^53 − 1, and the time into the window of `intervalMs` after each.
 */
function forwardWindows(readings: number[], intervalMs: number): number[] {
  let last = 0;
  let time = 0;
  let start = 0;
  return readings.map((reading) => {
    if (reading > last) time = Math.min(time + (reading - last), Number.MAX_SAFE_INTEGER);
    last = reading;
    if (time - start >= intervalMs) start = time;
    return time - start;
  });
}

for (const [name, make] of Object.entries(wallCores)) {
  test(title(`${name}: both backends count the forward steps of wall readings alike`), (t) => {
    // Readings stepping back and forth, now and then by an hour or to the ends of the range.
    const random = prng(7);
    const hour = 3_600_000;
    const max = Number.MAX_SAFE_INTEGER;
    for (const intervalMs of [1000, 60_000, 2 ** 52]) {
      const readings: number[] = [];
      let reading = 0;
      for (let i = 0; i < 2000; i++) {
        const roll = random();
        if (roll < 0.01) reading = random() < 0.5 ? max : -max;
        else reading += roll < 0.06 ? -hour : Math.floor((random() - 0.3) * 2000);
        reading = Math.min(max, Math.max(-max, reading));
        readings.push(reading);
      }
      const expected = forwardWindows(readings, intervalMs);
      for (const b of [nativeBackend, fallbackBackend]) {
        const observe = make(b, intervalMs, 1_000_000);
        const window = new Float64Array(1);
        const counted = readings.map((nowMs) => (observe(nowMs, window), window[0]!));
        t.deepEqual(counted, expected, `${b.name}, intervalMs ${intervalMs}`);
      }
    }
  });

  test(title(`${name}: a core reading the wall clock itself counts it behind a passed reading as no time`), (t) => {
    // The native fast path stepping back: a reading passed an hour ahead (a fake timer), then the
    // engine's clock read by the core itself (READ_WALL_CLOCK), from an origin a moment ago.
    for (const b of [nativeBackend, fallbackBackend]) {
      const observe = make(b, 2 ** 52, Date.now());
      const window = new Float64Array(1);
      observe(3_600_000, window);
      t.is(window[0], 3_600_000, b.name);
      observe(READ_WALL_CLOCK, window);
      t.is(window[0], 3_600_000, `${b.name}: the wall clock, behind, counts as no time`);
    }
  });
}

test(title('the native core refuses wall readings that are not whole safe milliseconds'), (t) => {
  // lib/ passes only whole readings within ±(2^53 − 1) (wallReadingMs) or READ_WALL_CLOCK; the
  // fallback core trusts it, the native one checks what crosses the binding.
  const core = new nativeBackend.Rate(1000, 2, 64, 1n, false, 0);
  for (const nowMs of [0.5, -0.5, 2 ** 53, -(2 ** 53), Infinity, -Infinity]) {
    throwsShape(t, () => core.observe('k', 1, nowMs), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: 'The "nowMs" argument must be whole milliseconds within ±(2^53 − 1), or NaN',
    });
  }
  t.is(core.observe('k', 1, -5), 1, 'a reading behind the origin is one');
});

test.serial(title('on dateClock, a call looks Date.now up once; only the fallback core calls it'), (t) => {
  // Counts reads of the `Date.now` property, leaving it the engine's own function (a replaced one
  // would be read in JavaScript, by design). Native: one look-up per call, to see that `Date.now`
  // is the engine's, and the core reads the clock; fallback: its core then calls `Date.now()`.
  const descriptor = Object.getOwnPropertyDescriptor(Date, 'now')!;
  const engine = Date.now;
  const rate = new Rate({ intervalMs: WINDOW, seed: 1n, clock: dateClock });
  let reads = 0;
  Object.defineProperty(Date, 'now', {
    configurable: true,
    get: () => {
      reads++;
      return engine;
    },
  });
  try {
    for (let i = 0; i < 10; i++) rate.observe('k');
  } finally {
    Object.defineProperty(Date, 'now', descriptor);
  }
  t.is(reads, backend === 'native' ? 10 : 20);
  t.is(rate.observe('k'), 11);
});

test.serial(title('the Fastify store turns its window on the wall clock read in the core'), async (t) => {
  const store = new (keepcountFastifyStore({ seed: 1n }))({});
  const counts: number[] = [];
  const incr = (): void =>
    store.incr(
      'client',
      (error, result) => {
        if (error !== null) throw error;
        counts.push(result!.current);
      },
      40,
      100,
    );
  incr();
  incr();
  await sleep(50);
  incr();
  t.deepEqual(counts, [1, 2, 1]);
});

test(title('a Date.now replaced before keepcount loads is read on every call, never the wall clock'), async (t) => {
  const { code, stdout, stderr } = await runFixture('date-faked-first.ts');
  t.is(code, 0, stderr);
  t.deepEqual(JSON.parse(stdout), [WINDOW, WINDOW - 7000]);
});
