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
  return { steps, word, claimed, baseline, current, during, countK, samples };
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

test(title('fallback: stale counts a late writer moves before the carry are taken back by it'), (t) => {
  const { steps, word, claimed, baseline, current, countK, samples } = idleRotation();
  const [stale, next] = [steps.sketches[current], steps.sketches[1 - current]!];
  // The claimant has cleared and finished but not carried yet.
  next.reset();
  Atomics.store(word, RATE_WORD, finished(claimed));
  // A late writer moves its counters whole, the stale 3 with its 4...
  t.is(countK(4), 7);
  t.deepEqual(samples('k'), [0, 7]);
  // ...and the carry takes the 3 back: each event once, no stale count.
  next.carryFrom(stale, baseline, () => true);
  t.deepEqual(samples('k'), [0, 4]);
  t.deepEqual(samples('other'), [0, 0]);
});
