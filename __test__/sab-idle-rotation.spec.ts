/**
 * The fallback's rotation after idleness on a SharedArrayBuffer, step by step: the interleavings a
 * race test rarely hits (a writer that counts after the carry passed its counters, one that moves
 * them before the carry reaches them), reached through the rate's private steps with the interval
 * word written by hand, as `crates/limits/src/shared/rate.rs`' unit tests do for the native side.
 * Both backends share the buffer layout and this protocol; `sab.spec.ts` races them together.
 */
import test from 'ava';
import { BufferRate } from '../fallback/buffer.js';
import { hashKey } from '../fallback/hasher.js';
import { Rate } from '../lib/index.js';
import { RATE_WORD } from '../lib/shared-buffer.js';
import { title } from './helpers.js';

const ROTATING = 2n;
const STALE = 4n;
const SECOND_MS = 1000;

interface View {
  rotating: boolean;
  stale: boolean;
  current: 0 | 1;
}

interface Sketch {
  snapshot(): BigInt64Array;
  reset(): void;
  carryFrom(from: Sketch, baseline: BigInt64Array, goOn: () => boolean): void;
}

/** The private steps of a {@link BufferRate}, reached for the test. */
interface Steps {
  sketches: [Sketch, Sketch];
  view(nowMs: number): View;
  count(h1: number, h2: number, events: number, view: View): number;
  carryLate(h1: number, h2: number, events: number, view: View): void;
  rotate(claimed: bigint, baseline: BigInt64Array | undefined): void;
}

const finished = (claimed: bigint): bigint => (claimed & ~(ROTATING | 1n)) | ((claimed & 1n) ^ 1n);

/**
 * A rate that counted "k" 3 times and "other" 5 times in its first interval, then stood idle for
 * three intervals, and a claimant that copied the stale sketch and claimed the rotation but has
 * neither cleared nor finished; `during` is a writer's view of it.
 */
function idleRotation() {
  const buffer = Rate.createSharedBuffer({ intervalMs: SECOND_MS, hashes: 2, slots: 64, seed: 1n });
  const rate = new BufferRate(new BigInt64Array(buffer), SECOND_MS, 2, 64, 1n);
  const steps = rate as unknown as Steps;
  const word = new BigUint64Array(buffer);
  rate.observe('k', 3, 10 * SECOND_MS);
  rate.observe('other', 5, 10 * SECOND_MS);
  const now = 13 * SECOND_MS;
  // A fresh buffer's first call rotated (its interval started at the clock's origin): the sketch
  // counting now is the one the flag names.
  const current = Number(Atomics.load(word, RATE_WORD) & 1n) as 0 | 1;
  const baseline = steps.sketches[current].snapshot();
  const claimed = 13_000_000_000n | BigInt(current) | ROTATING | STALE;
  Atomics.store(word, RATE_WORD, claimed);
  const during = steps.view(now);
  const { h1, h2 } = hashKey('k', 1, 0);
  const samples = (key: string) => {
    const { prevSamples, currSamples } = rate.sample(key, now);
    return [prevSamples, currSamples];
  };
  const countK = (events: number) => steps.count(h1, h2, events, during);
  return { rate, steps, word, claimed, baseline, current, during, h1, h2, countK, samples };
}

test(title('fallback: a rotation after idleness carries the events counted during it'), (t) => {
  const { steps, claimed, baseline, current, during, countK, samples } = idleRotation();
  t.like(during, { rotating: true, stale: true, current });
  // Counted into the stale sketch, so the count returned includes the old 3 (documented).
  t.is(countK(2), 5);
  t.deepEqual(samples('k'), [0, 0]);
  steps.rotate(claimed, baseline);
  t.deepEqual(samples('k'), [0, 2]);
  t.deepEqual(samples('other'), [0, 0]);
  // A writer that read the rotating word and counts after the carry passed its counters sees the
  // rotation finished and carries them itself.
  t.is(countK(4), 4);
  t.deepEqual(samples('k'), [0, 6]);
});

test(title('fallback: a late writer moves its own events and never the stale counts'), (t) => {
  const { steps, word, claimed, baseline, current, countK, samples } = idleRotation();
  const [stale, next] = [steps.sketches[current], steps.sketches[1 - current]!];
  // The claimant has cleared and finished but not carried yet.
  next.reset();
  Atomics.store(word, RATE_WORD, finished(claimed));
  // A late writer moves the 4 it counted, not the stale 3 its counters also hold...
  t.is(countK(4), 7);
  t.deepEqual(samples('k'), [0, 4]);
  // ...and the carry adds what is left of the gain over its copy: nothing.
  next.carryFrom(stale, baseline, () => true);
  t.deepEqual(samples('k'), [0, 4]);
  t.deepEqual(samples('other'), [0, 0]);
});

test(title('fallback: a refund between a late writer and the carry leaves no counter below zero'), (t) => {
  const { rate, steps, word, claimed, baseline, current, countK, samples } = idleRotation();
  const [stale, next] = [steps.sketches[current], steps.sketches[1 - current]!];
  next.reset();
  Atomics.store(word, RATE_WORD, finished(claimed));
  // A writer counted during the rotation and moves its counts late; a refund then takes back what
  // "k" reads in the new interval, before the carry reaches its counters.
  t.is(countK(4), 7);
  const read = rate.observe('k', 0, 13 * SECOND_MS);
  t.is(rate.refund('k', read, 13 * SECOND_MS), 0);
  // The carry only adds to the new sketch: each counter stays where the refund stopped it. (When
  // the late writer moved the stale 3 too, the refund took them and the carry then subtracted
  // them: "k" read -3.)
  next.carryFrom(stale, baseline, () => true);
  t.deepEqual(samples('k'), [0, 0]);
  t.true(next.snapshot().every((count) => count >= 0n));
});

test(title('fallback: a late writer whose events the carry took moves only what is left'), (t) => {
  const { steps, claimed, baseline, current, during, h1, h2, samples } = idleRotation();
  const stale = steps.sketches[current] as unknown as { incrHashed(h1: number, h2: number, events: number): number };
  // Writer A counts 2 during the rotation, but checks the word only after the carry took them.
  stale.incrHashed(h1, h2, 2);
  steps.rotate(claimed, baseline);
  t.deepEqual(samples('k'), [0, 2]);
  // Writer B counts 1 after the carry passed; A's check comes first and takes B's 1 (A cannot tell
  // whose events are left), B's finds nothing left: each event moved once.
  stale.incrHashed(h1, h2, 1);
  steps.carryLate(h1, h2, 2, during);
  steps.carryLate(h1, h2, 1, during);
  t.deepEqual(samples('k'), [0, 3]);
  t.deepEqual(samples('other'), [0, 0]);
  t.is(stale.incrHashed(h1, h2, 0), 0);
});
