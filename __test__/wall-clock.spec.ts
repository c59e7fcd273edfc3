import test, { type ExecutionContext } from 'ava';
import { mock } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { backend, HeavyHitters, Rate } from '../lib/index.js';
import { dateClock } from '../lib/clock.js';
import { keepcountFastifyStore } from '../lib/http/index.js';
import { runFixture, title } from './helpers.js';

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

  test.serial(title(`${name} on dateClock reads a Date.now faked after construction, from the same origin`), (t) => {
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
    // The engine's Date.now again: the core reads the wall clock from the same origin, a few ms on
    // (below the fake's 5,000, which counts as no time passing since the window began).
    assertWallReading(t, resetMs, origin, origin);
  });
}

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
