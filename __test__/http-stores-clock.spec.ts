// The stores' windows on a `Date.now()` that steps back: a fake timer installed after the app was
// built (node:test, sinon and jest fake timers start at 0), an NTP step, a VM snapshot restored.
// A step back must count as no time passing, with time counted again from the new reading at
// once, whichever side reads the clock (JavaScript, or the core while `Date.now` is the engine's).
// Every test here is serial: each fakes or replaces `Date.now`, and ava runs serial tests first.
import test, { type ExecutionContext } from 'ava';
import { mock } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { keepcountFastifyStore, KeepcountStore } from '../lib/http/index.js';
import { title } from './helpers.js';

const HOUR = 3_600_000;

/** One request of a client, as each store's package sends it: its count and the time its window ends. */
type Send = (key: string) => { count: number; resetMs: number };

/** The two stores with their default clock (`Date.now()`), counting in windows of `windowMs`. */
const stores: Record<string, (windowMs: number) => Send> = {
  KeepcountStore: (windowMs) => {
    // Every client counted exactly from its first request, as MemoryStore counts.
    const store = new KeepcountStore({ seed: 1n, heavyHitters: { threshold: 1 } });
    store.init({ windowMs, limit: 10 });
    return (key) => {
      const { totalHits, resetTime } = store.increment(key);
      return { count: totalHits, resetMs: resetTime!.getTime() - Date.now() };
    };
  },
  KeepcountFastifyStore: (windowMs) => {
    const store = new (keepcountFastifyStore({ seed: 1n }))({});
    return (key) => {
      let sent: { count: number; resetMs: number } | undefined;
      store.incr(
        key,
        (error, result) => {
          if (error !== null) throw error;
          sent = { count: result!.current, resetMs: result!.ttl };
        },
        windowMs,
        10,
      );
      return sent!;
    };
  },
};

/** Replaces `Date.now` by a function reading `clock.now` until the test ends, as fake timers do. */
function settableDate(t: ExecutionContext, startMs: number): { now: number } {
  const engine = Date.now;
  const clock = { now: startMs };
  Date.now = () => clock.now;
  t.teardown(() => {
    Date.now = engine;
  });
  return clock;
}

for (const [name, make] of Object.entries(stores)) {
  test.serial(title(`${name} turns its window on a fake Date enabled after its first request`), (t) => {
    // The app is built and has counted on the real clock; then a test fakes Date, from 0.
    const send = make(60_000);
    send('warm');
    mock.timers.enable({ apis: ['Date'] });
    t.teardown(() => mock.timers.reset());
    t.is(Date.now(), 0);
    t.deepEqual(
      [1, 2, 3].map(() => send('client').count),
      [1, 2, 3],
    );
    mock.timers.tick(60_000);
    // A new window, starting at this request: a full window from now.
    t.deepEqual(send('client'), { count: 1, resetMs: 60_000 }, 'a fake minute turned the window');
    mock.timers.tick(59_999);
    t.is(send('client').count, 2);
    mock.timers.tick(1);
    t.is(send('client').count, 1, 'and the next one');
  });

  test.serial(title(`${name}: Date.now stepped back an hour mid-window ends the window on time`), (t) => {
    const clock = settableDate(t, 10 * HOUR);
    const send = make(60_000);
    t.deepEqual(send('warm'), { count: 1, resetMs: 60_000 });
    clock.now += 30_000;
    t.deepEqual(send('warm'), { count: 2, resetMs: 30_000 });
    clock.now -= HOUR;
    // No time passed in the step back: 30 s of the window are left, from the new reading on.
    t.deepEqual(send('client'), { count: 1, resetMs: 30_000 });
    clock.now += 29_999;
    t.deepEqual(send('client'), { count: 2, resetMs: 1 });
    clock.now += 1;
    t.deepEqual(send('client'), { count: 1, resetMs: 60_000 }, 'the window turned 60 s after it began');
  });

  test.serial(title(`${name}: after a step back, a client within the limit stays within it`), (t) => {
    // The audit's case: limit 10 a minute, the clock stepped back an hour, a client sending 5
    // requests every 15 minutes. Each burst is a window of its own, as under MemoryStore.
    const clock = settableDate(t, 10 * HOUR);
    const send = make(60_000);
    send('warm');
    clock.now -= HOUR;
    const bursts = [];
    for (let quarter = 0; quarter <= 4; quarter++) {
      let count = 0;
      for (let i = 0; i < 5; i++) count = send('client').count;
      bursts.push(count);
      clock.now += 15 * 60_000;
    }
    t.deepEqual(bursts, [5, 5, 5, 5, 5]);
  });

  test.serial(title(`${name}: the engine's Date.now behind a fake one counts as no time, then as time`), async (t) => {
    // The store starts on a fake Date an hour ahead; the fake goes and the engine's clock, an
    // hour behind, is read again (by the native core itself for the Fastify store). The step
    // back counts as no time: the window turns 200 ms after it began, 150 of them faked.
    mock.timers.enable({ apis: ['Date'], now: Date.now() + HOUR });
    t.teardown(() => mock.timers.reset());
    const send = make(200);
    t.is(send('client').count, 1);
    mock.timers.tick(150);
    t.is(send('client').count, 2);
    mock.timers.reset();
    const { count, resetMs } = send('client');
    t.is(count, 3, 'the same window');
    t.true(resetMs > 0 && resetMs <= 50, `resetMs ${resetMs}`);
    await sleep(100);
    t.is(send('client').count, 1, 'a new window, 150 ms faked and 100 real after it began');
  });
}
