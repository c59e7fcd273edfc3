/**
 * Refunds racing with a shared Rate's rotation after idleness, in real worker threads: a worker
 * counts a key while this thread rotates, then refunds whatever the key reads while the carry runs.
 * A count the worker moved late into the new sketch used to carry the key's stale count with it;
 * a refund took the sum to zero and the carry then subtracted the stale count, leaving counters
 * below zero (shared/rate.rs, "Rotating after idleness"). `sab-idle-rotation.spec.ts` replays that
 * interleaving step by step; this races it.
 *
 * It cannot fail falsely: time moves only between rounds, while the worker waits, so nothing
 * stalls across an interval, every count is positive, and no refund reaches the stale sketch; the
 * new sketch then only grows under the carry. It detects the old bug in the rounds that race (the
 * worker counting while the rotation runs, which needs the two threads on two cores at once):
 * before the fix, 7 % to 43 % of them left counters below zero on the native backend and about
 * half on the fallback (runs on a loaded 2-core VM), so 200 raced rounds all missing has a chance
 * below 10^-6. On a machine too busy to give the threads two cores, few rounds race in the 10 s it
 * plays, and the test passes saying so.
 */
import { Worker } from 'node:worker_threads';
import test from 'ava';
import { backend, Rate } from '../lib/index.js';
import { FIRST_COUNTER, RATE_WORD } from '../lib/shared-buffer.js';
import { fixture, title } from './helpers.js';
import { Control, type RefundCarryData } from './refund-carry.js';

test(title('refunds racing with a rotation after idleness never leave a counter below zero'), async (t) => {
  const intervalMs = 1000;
  const [hashes, slots] = [4, 4096];
  const buffer = Rate.createSharedBuffer({ intervalMs, hashes, slots, seed: 11n });
  const control = new SharedArrayBuffer(4 * Object.keys(Control).length);
  const words = new Int32Array(control);
  Atomics.store(words, Control.time, 50_000);
  const rate = Rate.fromSharedBuffer(buffer, { clock: { now: () => Atomics.load(words, Control.time) } });
  const data: RefundCarryData = { buffer, control };
  const worker = new Worker(`require('tsx/cjs'); require(${JSON.stringify(fixture('refund-carry-worker.ts'))});`, {
    eval: true,
    workerData: data,
    env: { ...process.env, KEEPCOUNT_BACKEND: backend },
  });
  t.teardown(async () => {
    Atomics.store(words, Control.round, -1);
    Atomics.notify(words, Control.round);
    await worker.terminate();
  });
  await new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject));
  const counters = new BigInt64Array(buffer);
  const end = FIRST_COUNTER + 2 * hashes * slots;
  const low = new Int32Array(buffer, RATE_WORD * 8, 2);
  const failures: string[] = [];
  // Rounds until enough of them raced (the worker counted while the rotation ran: on a busy machine
  // it may get no core then), or for at most 10 s.
  const wanted = 200;
  const budget = performance.now() + 10_000;
  let [rounds, raced] = [0, 0];
  while (raced < wanted && performance.now() < budget) {
    const round = ++rounds;
    // Every counter of both sketches at 1, so that the stale sketch's carry swaps each of them:
    // the race has the carry's whole length. No other thread runs until the worker is told.
    counters.fill(1n, FIRST_COUNTER, end);
    rate.observe('k', 500);
    Atomics.add(words, Control.time, 3 * intervalMs);
    Atomics.store(words, Control.round, round);
    Atomics.notify(words, Control.round);
    const deadline = performance.now() + 10_000;
    while (Atomics.load(words, Control.watching) < round) {
      if (performance.now() > deadline) throw new Error(`round ${round}: the worker never started it`);
    }
    // Claims the rotation after idleness, clears, finishes and carries, all in this call.
    rate.observe('other', 1);
    t.is(Atomics.load(low, 0) & 6, 4, 'finished, and the previous interval stale');
    Atomics.store(words, Control.carried, round);
    if (Atomics.wait(words, Control.done, round - 1, 10_000) === 'timed-out') {
      throw new Error(`round ${round}: the worker never finished it`);
    }
    if (Atomics.load(words, Control.during) > 0) raced++;
    let below = 0;
    for (let i = FIRST_COUNTER; i < end; i++) if (counters[i]! < 0n) below++;
    if (below > 0) failures.push(`round ${round}: ${below} counters below zero, "k" reads ${rate.observe('k', 0)}`);
  }
  t.log(`${failures.length} of ${raced} raced rounds (of ${rounds}) left counters below zero`);
  if (raced < wanted) t.log(`only ${raced} of ${rounds} rounds raced in 10 s: the machine is busy`);
  t.deepEqual(failures, []);
});
