// Its own file: pausing is process-wide state, and ava runs one file per worker.
import test from 'ava';
import { setTimeout as delay } from 'node:timers/promises';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { pauseForFork, sleep, timeout, TimeoutError, timeoutSignal, unpause } from '../lib/index.js';
import { fixture, title } from './helpers.js';

test.serial(title('while paused for fork, new timers complete at once; unpause restores them'), async (t) => {
  const armedBefore = sleep(30);
  pauseForFork();
  try {
    const start = performance.now();
    await t.throwsAsync(timeout(new Promise(() => {}), 60_000), { instanceOf: TimeoutError });
    t.is(await timeout(Promise.resolve('settled first'), 60_000), 'settled first');
    await sleep(60_000);
    const signal = timeoutSignal(60_000);
    t.true(signal.aborted);
    t.is((signal.reason as DOMException).name, 'TimeoutError');
    t.true(performance.now() - start < 1000);
  } finally {
    unpause();
  }
  await armedBefore;
  const start = performance.now();
  await t.throwsAsync(timeout(new Promise(() => {}), 20), { instanceOf: TimeoutError });
  t.true(performance.now() - start >= 20);
  t.false(timeoutSignal(60_000).aborted);
});

test.serial(
  title("another thread's sleeps neither spin nor end early while this one is paused for fork"),
  async (t) => {
    // A worker starts a loop of sleep(10) while this thread is paused for 400 ms. Firing the
    // worker's deadlines at once (as a paused pingora timer does) ended its sleeps early and its
    // loop raced: its event loop was busy for most of the pause (226 ms of the process's CPU).
    // Whatever the backend does with another thread's timers during the pause (the fallback's keep
    // ticking, the native ones wait for the unpause), no sleep may end early, the loop may wake at
    // most once per 10 ms tick, and the worker's event loop must be idle most of the time: busy
    // under 150 ms of the 400.
    const counters = new Int32Array(new SharedArrayBuffer(8));
    const worker = new Worker(`require('tsx/cjs'); require(${JSON.stringify(fixture('sleep-loop.ts'))});`, {
      eval: true,
      workerData: counters.buffer,
    });
    t.teardown(() => worker.terminate());
    const reply = (): Promise<unknown> => new Promise((resolve) => worker.once('message', resolve));
    await reply();
    pauseForFork();
    let busyMs: number;
    try {
      worker.postMessage('start');
      await delay(400);
      worker.postMessage('load?');
      busyMs = (await reply()) as number;
    } finally {
      unpause();
    }
    const wakeUps = Atomics.load(counters, 0);
    t.log(`during the pause: the worker's loop busy ${busyMs.toFixed(0)} ms, ${wakeUps} wake-ups`);
    t.is(Atomics.load(counters, 1), 0, 'sleeps that ended early');
    t.true(wakeUps <= 41, `${wakeUps} wake-ups during a 400 ms pause`);
    t.true(busyMs < 150, `the worker's event loop was busy ${busyMs.toFixed(0)} ms of a 400 ms pause`);
    await delay(200);
    t.true(Atomics.load(counters, 0) > wakeUps, 'the loop goes on after unpause');
    t.is(Atomics.load(counters, 1), 0, 'sleeps that ended early');
  },
);

test.serial(title('while paused for fork, a thenable fulfilling with a thenable times out at once'), async (t) => {
  const pending = { then: (resolve: (value: unknown) => void) => resolve(new Promise(() => {})) };
  const inTime = {
    then: (resolve: (value: unknown) => void) => resolve({ then: (inner: (v: string) => void) => inner('inner') }),
  };
  pauseForFork();
  let results: unknown[];
  try {
    // `resolve` handed the inner promise locked the result to it: settled after 2 s, not at once.
    const timedOut = timeout(pending as PromiseLike<unknown>, 60_000).catch((error: unknown) => error);
    results = await Promise.all([
      Promise.race([timedOut, delay(2000, 'still pending')]),
      timeout(inTime as PromiseLike<unknown>, 60_000).catch((error: unknown) => error),
    ]);
  } finally {
    unpause();
  }
  t.true(results[0] instanceof TimeoutError, String(results[0]));
  t.is((results[0] as TimeoutError).code, 'ERR_KEEPCOUNT_TIMEOUT');
  t.is((results[0] as TimeoutError).message, 'Timed out after 60000 ms');
  // Settled at once, through the thenable it fulfils with too: it wins, as a settled promise does.
  t.is(results[1], 'inner');
});

test.serial(
  title('while paused for fork, a native promise fulfilled with an object that became a thenable times out at once'),
  async (t) => {
    const later: Record<string, unknown> = {};
    const fulfilled = Promise.resolve(later);
    // Runs before the await below resumes: the object is a thenable from then on.
    void fulfilled.then(() => (later.then = () => {}));
    await fulfilled;
    pauseForFork();
    let result: unknown;
    try {
      // Before, the native promise's `then` was handed `resolve`, which adopted the new `then`.
      const timedOut = timeout(fulfilled, 60_000).catch((error: unknown) => error);
      result = await Promise.race([timedOut, delay(2000, 'still pending')]);
    } finally {
      unpause();
    }
    t.true(result instanceof TimeoutError, String(result));
    // A settled native promise with a plain value still wins, as pingora-timeout's does.
    pauseForFork();
    try {
      t.is(await timeout(Promise.resolve(7), 60_000), 7);
    } finally {
      unpause();
    }
  },
);

test.serial(title('timers armed before the pause wait for the unpause, on both backends'), async (t) => {
  let slept = false;
  const armed = sleep(20).then(() => (slept = true));
  pauseForFork();
  try {
    // node:timers, not keepcount's: those are what the pause holds.
    await delay(150);
    t.false(slept, 'a sleep armed before the pause fired during it');
  } finally {
    unpause();
  }
  const unpausedAt = performance.now();
  await Promise.race([armed, delay(3000)]);
  t.true(slept, 'the sleep fires after the unpause');
  t.log(`fired ${(performance.now() - unpausedAt).toFixed(0)} ms after the unpause`);
});

test.serial(title("another thread's pause and unpause do not end this thread's pause"), async (t) => {
  // The native pause is the whole process's: a flag that any unpause cleared let a worker's
  // pauseForFork()/unpause() pair release this thread's timers while it was still paused.
  const lib = JSON.stringify(join(__dirname, '..', 'lib', 'index.ts'));
  let slept = false;
  const armed = sleep(20).then(() => (slept = true));
  pauseForFork();
  try {
    // Two workers pausing and unpausing at once, ten times each, racing each other's counts.
    const workers = [0, 1].map(
      () =>
        new Worker(
          `require('tsx/cjs');
           const keepcount = require(${lib});
           for (let i = 0; i < 10; i++) {
             keepcount.pauseForFork();
             keepcount.unpause();
           }
           require('node:worker_threads').parentPort.postMessage('done');`,
          { eval: true },
        ),
    );
    await Promise.all(workers.map((worker) => new Promise((resolve) => worker.once('message', resolve))));
    await Promise.all(workers.map((worker) => worker.terminate()));
    await delay(150);
    t.false(slept, 'the sleep fired although this thread had not unpaused');
  } finally {
    unpause();
  }
  await Promise.race([armed, delay(3000)]);
  t.true(slept, 'the sleep fires after this thread unpauses');
});

test.serial(title('a worker ended while paused for fork leaves no pause behind'), async (t) => {
  // The native pause is the whole process's: were it to outlive the worker that set it, every
  // other thread's timers would wait for an unpause that never comes.
  const lib = JSON.stringify(join(__dirname, '..', 'lib', 'index.ts'));
  const worker = new Worker(
    `require('tsx/cjs');
     require(${lib}).pauseForFork();
     require('node:worker_threads').parentPort.postMessage('paused');
     setInterval(() => {}, 1000);`,
    { eval: true },
  );
  await new Promise((resolve) => worker.once('message', resolve));
  await worker.terminate();
  const started = performance.now();
  const slept = await Promise.race([sleep(20).then(() => true), delay(3000).then(() => false)]);
  t.true(slept, 'a sleep of this thread ends after the worker is gone');
  t.true(performance.now() - started >= 19);
});
