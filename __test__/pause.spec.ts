// Its own file: pausing is process-wide state, and ava runs one file per worker.
import test from 'ava';
import { pauseForFork, sleep, timeout, TimeoutError, timeoutSignal, unpause } from '../lib/index.js';
import { title } from './helpers.js';

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
