// Estimator.openShared and Rate.openShared: counters shared by real processes (child_process.fork
// workers) through a segment file. On the fallback backend every entry point must refuse with
// ERR_KEEPCOUNT_UNSUPPORTED rather than count per process; argument checks are the same on both.
// Segment files themselves: shared-segment.spec.ts; in-flight slots: shared-inflight.spec.ts.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import { backend, Estimator, ManualClock, Rate } from '../lib/index.js';
import { throwsShape, title } from './helpers.js';
import { scratch, sleep, unsupported, workers } from './shared-workers.js';

const SEED = 0x5eedn;

test(title('four processes incrementing one key reach the exact total, and all read it'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Estimator.openShared('hits', { seed: SEED, dir }), unsupported('Estimator.openShared'));
    return;
  }
  const all = await workers(4);
  await Promise.all(all.map((w) => w.send({ op: 'open-estimator', name: 'hits', dir })));
  const perWorker = 20_000;
  const seen = (await Promise.all(all.map((w) => w.send({ op: 'incr', key: 'hot', times: perWorker })))) as number[];
  for (const count of seen) t.true(count >= perWorker && count <= 4 * perWorker);
  const after = await Promise.all(all.map((w) => w.send({ op: 'get', key: 'hot' })));
  t.deepEqual(after, [4 * perWorker, 4 * perWorker, 4 * perWorker, 4 * perWorker]);
  const here = Estimator.openShared('hits', { seed: SEED, dir });
  t.is(here.get('hot'), 4 * perWorker);
  here.close();
  await Promise.all(all.map((w) => w.exit()));
});

test(title('a window quota on a shared Rate holds one limit for all processes together'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Rate.openShared('quota', { intervalMs: 60_000, seed: SEED, dir }),
      unsupported('Rate.openShared'),
    );
    return;
  }
  const all = await workers(3);
  await Promise.all(all.map((w) => w.send({ op: 'open-rate', name: 'quota', dir, intervalMs: 60_000 })));
  // Three processes, 10 requests each from one client, a limit of 12: per-process limits would
  // admit 30, the shared one exactly 12 (one key alone in the sketch reads exactly).
  const allowed = (await Promise.all(
    all.map((w) => w.send({ op: 'consume', key: 'client', times: 10, limit: 12 })),
  )) as number[];
  t.is(
    allowed.reduce((a, b) => a + b, 0),
    12,
    `allowed per process: ${allowed.join(', ')}`,
  );
  await Promise.all(all.map((w) => w.exit()));
});

test(title('processes refunding counts of a shared Rate at once take each once, never below zero'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Rate.openShared('refunds', { intervalMs: 1000, seed: SEED, dir }),
      unsupported('Rate.openShared'),
    );
    return;
  }
  const all = await workers(2);
  await Promise.all(all.map((w) => w.send({ op: 'open-rate', name: 'refunds', dir, intervalMs: 600_000 })));
  // Each process adds 1 and takes back 2, 20,000 times: every refund finds its own count at least,
  // so the counts end at exactly zero; `observe(key, -2)` took them to −20,000.
  const lowest = (await Promise.all(
    all.map((w) => w.send({ op: 'observe-refund', key: 'k', times: 20_000 })),
  )) as number[];
  t.true(
    lowest.every((count) => count >= 0),
    `lowest counts a refund left: ${lowest.join(', ')}`,
  );
  t.deepEqual(await all[0]!.send({ op: 'sample', key: 'k' }), [0, 0]);
  await Promise.all(all.map((w) => w.exit()));
});

test(title('a shared Rate rotates once per interval, seen identically by every process'), async (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.openShared('r', { intervalMs: 1000, seed: SEED, dir }), unsupported('Rate.openShared'));
    return;
  }
  // Margins: each round's observations take a few ms right after an interval starts, and all
  // reads come within a few ms of each other 1.5 intervals later, so a read is half an interval
  // from either edge. The test fails only if this machine stalls a process for 1.5 s (timers on
  // it have run 0.8 s late).
  const intervalMs = 3000;
  const all = await workers(3);
  await Promise.all(all.map((w) => w.send({ op: 'open-rate', name: 'r', dir, intervalMs })));
  // Let the interval the creator started lapse, then start a fresh one with a read.
  await sleep(2.5 * intervalMs);
  t.deepEqual(await all[0]!.send({ op: 'sample', key: 'k' }), [0, 0]);
  for (let round = 1; round <= 3; round++) {
    await Promise.all(all.map((w) => w.send({ op: 'observe', key: 'k', times: 100 * round })));
    await sleep(1.5 * intervalMs);
    const samples = await Promise.all(all.map((w) => w.send({ op: 'sample', key: 'k' })));
    // The first read ended the interval for everyone; nobody ended it again.
    t.deepEqual(samples, [
      [300 * round, 0],
      [300 * round, 0],
      [300 * round, 0],
    ]);
  }
  await Promise.all(all.map((w) => w.exit()));
});

test(title('observeWindow on a shared Rate counts once and tells the time left in the host’s interval'), (t) => {
  const dir = scratch(t);
  if (backend === 'fallback') {
    throwsShape(t, () => Rate.openShared('w', { intervalMs: 60_000, seed: SEED, dir }), unsupported('Rate.openShared'));
    return;
  }
  const rate = Rate.openShared('w', { intervalMs: 60_000, seed: SEED, dir });
  const before = rate.rateWith('k', (c) => c.currentIntervalFraction);
  const first = rate.observeWindow('k', 2);
  const second = rate.observeWindow(7, 1);
  const third = rate.observeWindow(new Uint8Array([1, 2]), 3);
  t.deepEqual([first.count, second.count, third.count], [2, 1, 3]);
  t.is(
    rate.rateWith('k', (c) => c.currSamples),
    2,
  );
  // Whole milliseconds left, counting down: in [1, intervalMs], no more than before the calls.
  for (const { resetMs } of [first, second, third]) {
    t.true(Number.isInteger(resetMs) && resetMs >= 1 && resetMs <= 60_000, String(resetMs));
    t.true(resetMs <= Math.ceil((1 - before) * 60_000), `${resetMs} after ${before}`);
  }
  throwsShape(t, () => rate.observeWindow('k', 0.5), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /^The "events" argument must be/,
  });
  rate.close();
});

test(title('a clock option is refused where time is shared, on both backends, before anything is opened'), (t) => {
  const dir = scratch(t);
  const clock = new ManualClock();
  const refused = {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message:
      'The "clock" option must be absent: a shared rate keeps time on the host\'s monotonic clock, which every ' +
      'process and thread reads. Received an instance of ManualClock',
  };
  // Before, the clock was ignored: a test advancing it ran on real time without knowing.
  throwsShape(t, () => Rate.openShared('clocked', { intervalMs: 1000, seed: SEED, dir, clock } as never), refused);
  throwsShape(t, () => Rate.createSharedBuffer({ intervalMs: 1000, clock } as never), refused);
  t.false(existsSync(join(dir, 'keepcount.clocked')));
});

test(title('a shared Rate interval beyond 64-bit nanoseconds is refused on both backends, as a buffer’s is'), (t) => {
  const dir = scratch(t);
  // The segment keeps the interval in nanoseconds in 64 bits: every longer interval used to be
  // stored as 2^64 − 1 ns, so different intervals opened one segment without a mismatch.
  for (const intervalMs of [18446744073710, 2 ** 45, 2 ** 52]) {
    throwsShape(t, () => Rate.openShared('long', { intervalMs, seed: SEED, dir, hashes: 1, slots: 8 }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: `The "intervalMs" option must be an integer in [1, 18446744073709]. Received ${intervalMs}`,
    });
  }
  t.false(existsSync(join(dir, 'keepcount.long')));
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Rate.openShared('long', { intervalMs: 18446744073709, seed: SEED, dir }),
      unsupported('Rate.openShared'),
    );
    return;
  }
  // The longest, 584 years, still opens, and a shorter one is told apart from it.
  using longest = Rate.openShared('long', { intervalMs: 18446744073709, seed: SEED, dir, hashes: 1, slots: 8 });
  t.is(longest.intervalMs, 18446744073709);
  throwsShape(t, () => Rate.openShared('long', { intervalMs: 18446744073708, seed: SEED, dir, hashes: 1, slots: 8 }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: /was created with intervalMs 18446744073709, not 18446744073708 as requested/,
  });
});
