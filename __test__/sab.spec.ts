// Estimator and Rate over a SharedArrayBuffer shared by worker threads: exact totals across
// threads, the native and the fallback backend giving the same answers on one buffer (each worker
// forces its own backend), one rotation per interval for every thread, a buffer that outlives the
// thread that made it and a worker terminated mid-loop, and the errors for bad buffers.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import test, { type ExecutionContext } from 'ava';
import { crc32 } from '../fallback/crc32.js';
import { backend, Estimator, Inflight, ManualClock, Rate } from '../lib/index.js';
import type { BufferWorkerData, Command } from './fixtures/buffer-worker.js';
import { fixture, runFixture, throwsShape, title } from './helpers.js';

type Backend = 'native' | 'fallback';

/** A worker thread running fixtures/buffer-worker.ts on `backend`, answering one message per command. */
class BufferWorker {
  private readonly worker: Worker;
  private readonly answers: { ok?: unknown; error?: string }[] = [];
  private waiting: (() => void) | undefined;

  constructor(data: BufferWorkerData, on: Backend = backend) {
    this.worker = new Worker(`require('tsx/cjs'); require(${JSON.stringify(fixture('buffer-worker.ts'))});`, {
      eval: true,
      workerData: data,
      env: { ...process.env, KEEPCOUNT_BACKEND: on },
    });
    this.worker.on('message', (answer: { ok?: unknown; error?: string }) => {
      this.answers.push(answer);
      this.waiting?.();
    });
  }

  /** The next answer; rejects with the worker's error. */
  async next(): Promise<unknown> {
    while (this.answers.length === 0) await new Promise<void>((resolve) => (this.waiting = resolve));
    const answer = this.answers.shift()!;
    if (answer.error !== undefined) throw new Error(answer.error);
    return answer.ok;
  }

  async send(command: Command): Promise<unknown> {
    this.worker.postMessage(command);
    return this.next();
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}

/**
 * Workers over `data`, one per backend named, each ready (its first answer is its backend), and
 * stopped when `t` ends however it ends.
 */
async function start(t: ExecutionContext, data: BufferWorkerData, backends: Backend[]): Promise<BufferWorker[]> {
  const all = backends.map((on) => new BufferWorker(data, on));
  t.teardown(() => Promise.all(all.map((w) => w.stop())).then(() => undefined));
  const loaded = await Promise.all(all.map((w) => w.next()));
  if (loaded.join() !== backends.join()) throw new Error(`workers loaded ${loaded.join()}`);
  return all;
}

test(title('four worker threads incrementing one key reach the exact total, and all read it'), async (t) => {
  const buffer = Estimator.createSharedBuffer({ seed: 7n });
  const all = await start(t, { buffer, kind: 'estimator' }, [backend, backend, backend, backend]);
  const times = 20_000;
  await Promise.all(all.map((w) => w.send({ op: 'incr', keys: ['hot'], value: 1, times })));
  const seen = await Promise.all(all.map((w) => w.send({ op: 'get', keys: ['hot'] })));
  t.deepEqual(seen, [[4 * times], [4 * times], [4 * times], [4 * times]]);
  t.is(Estimator.fromSharedBuffer(buffer).get('hot'), 4 * times);
  await Promise.all(all.map((w) => w.stop()));
});

test(title('a buffer sketch returns the number nearest its i64 counter, past 2^53 and up to saturation'), (t) => {
  const sketch = Estimator.fromSharedBuffer(Estimator.createSharedBuffer({ hashes: 2, slots: 8, seed: 5n }));
  const step = Number.MAX_SAFE_INTEGER;
  let exact = 0n;
  // Through 2^53, where numbers stop being exact, to the i64 bound (1,024 steps of 2^53 − 1) and on.
  for (let i = 1; i <= 1100; i++) {
    exact += BigInt(step);
    if (exact > 2n ** 63n - 1n) exact = 2n ** 63n - 1n;
    t.is(sketch.incr('k', step), Number(exact), `step ${i}`);
  }
  for (let i = 1; i <= 2200; i++) {
    exact -= BigInt(step);
    if (exact < -(2n ** 63n)) exact = -(2n ** 63n);
    t.is(sketch.incr('k', -step), Number(exact), `step back ${i}`);
  }
});

test(title('the native and the fallback backend count in one buffer and give the same answers'), async (t) => {
  const buffer = Estimator.createSharedBuffer({ hashes: 3, slots: 256, seed: 0xfeedn });
  const [native, fallback] = await start(t, { buffer, kind: 'estimator' }, ['native', 'fallback']);
  const keys = Array.from({ length: 500 }, (_, i) => (i % 2 === 0 ? `10.0.${i >> 8}.${i & 255}` : i));
  // Both at once on the same keys (with collisions: 500 keys in 256 slots), then each on its own.
  await Promise.all([
    native!.send({ op: 'incr', keys, value: 3, times: 20 }),
    fallback!.send({ op: 'incr', keys, value: 2, times: 20 }),
  ]);
  await native!.send({ op: 'incr', keys: ['only-native'], value: 5, times: 1 });
  await fallback!.send({ op: 'incr', keys: ['only-fallback'], value: -4, times: 1 });
  // Saturation at the i64 bounds, reached by one backend and read by the other.
  await native!.send({ op: 'incr', keys: ['max'], value: Number.MAX_SAFE_INTEGER, times: 1100 });
  await fallback!.send({ op: 'incr', keys: ['max'], value: Number.MAX_SAFE_INTEGER, times: 10 });
  await fallback!.send({ op: 'incr', keys: ['min'], value: -Number.MAX_SAFE_INTEGER, times: 1100 });
  await native!.send({ op: 'incr', keys: ['min'], value: -Number.MAX_SAFE_INTEGER, times: 10 });
  const all = [...keys, 'only-native', 'only-fallback', 'max', 'min', 'never'];
  const [fromNative, fromFallback] = await Promise.all([
    native!.send({ op: 'get', keys: all }),
    fallback!.send({ op: 'get', keys: all }),
  ]);
  t.deepEqual(fromNative, fromFallback);
  const here = Estimator.fromSharedBuffer(buffer);
  t.deepEqual(
    all.map((key) => here.get(key)),
    fromNative,
  );
  t.is(here.get('max'), 2 ** 63);
  t.is(here.get('min'), -(2 ** 63));
  t.true(here.get(keys[0]!) >= 100);
  const [bytesNative, bytesFallback] = await Promise.all([
    native!.send({ op: 'serialize' }),
    fallback!.send({ op: 'serialize' }),
  ]);
  t.deepEqual(bytesNative, bytesFallback);
  t.deepEqual(Array.from(here.serialize()), bytesNative);
  await Promise.all([native!.stop(), fallback!.stop()]);
});

test(title('every thread sees the same rotations of a shared Rate, on either backend'), async (t) => {
  const intervalMs = 1000;
  const buffer = Rate.createSharedBuffer({ intervalMs, hashes: 2, slots: 64, seed: 3n });
  const startMs = 50_000;
  const all = await start(t, { buffer, kind: 'rate', startMs }, ['native', 'fallback', backend, 'native']);
  const clock = new ManualClock(startMs);
  const here = Rate.fromSharedBuffer(buffer, { clock, intervalMs });
  const advance = async (ms: number) => {
    clock.advance(ms);
    await Promise.all(all.map((w) => w.send({ op: 'advance', ms })));
  };
  const samples = async () => Promise.all(all.map((w) => w.send({ op: 'sample', key: 'k' })));
  // A fresh buffer's first interval started at the clock's origin: the workers' first calls race
  // to end it after what reads as a long idle time, and whatever they count meanwhile is carried
  // into the new interval (shared/rate.rs, "Rotating after idleness").
  for (const [round, per] of [10, 20, 30].entries()) {
    await Promise.all(all.map((w) => w.send({ op: 'observe', key: 'k', times: per })));
    await advance(round === 0 ? 500 : 0);
    const during = await samples();
    t.is(new Set(during.map((s) => JSON.stringify(s))).size, 1, `round ${round}: ${JSON.stringify(during)}`);
    await advance(intervalMs - (round === 0 ? 500 : 0));
    // Whichever thread ends the interval does it for all: the total of all four survives.
    const after = await samples();
    t.deepEqual(after, Array(4).fill([4 * per, 0, 0]), `round ${round}`);
    t.is(here.rate('k'), 4 * per);
  }
  // Two idle intervals: the previous counts are stale for everyone.
  await advance(2 * intervalMs);
  t.deepEqual(await samples(), Array(4).fill([0, 0, 0]));
  t.deepEqual(here.observeWindow('k'), { count: 1, resetMs: intervalMs });
  await Promise.all(all.map((w) => w.stop()));
});

test(title('events counted while a shared Rate rotates after idleness land in the new interval once'), async (t) => {
  const intervalMs = 1000;
  // 4 × 65,536 counters a sketch: the rotation's clear and carry take long enough (milliseconds in
  // the fallback) for the other threads to count while they run.
  const buffer = Rate.createSharedBuffer({ intervalMs, hashes: 4, slots: 65_536, seed: 5n });
  const all = await start(t, { buffer, kind: 'rate', startMs: 50_000 }, ['native', 'fallback', 'native', 'fallback']);
  const per = 3000;
  for (let round = 0; round < 6; round++) {
    // Three idle intervals: both sketches hold stale counts, so the first call of the round
    // rotates after idleness while the others count. No clock moves during a round, so nothing
    // stalls for an interval: every event must be counted once, none of the stale ones at all.
    await Promise.all(all.map((w) => w.send({ op: 'advance', ms: 3 * intervalMs })));
    await Promise.all(all.map((w) => w.send({ op: 'observe', key: 'k', times: per })));
    const samples = (await Promise.all(all.map((w) => w.send({ op: 'sample', key: 'k' })))) as number[][];
    t.deepEqual(
      samples.map(([previous, current]) => [previous, current]),
      Array(4).fill([0, 4 * per]),
      `round ${round}`,
    );
  }
});

test(
  title('a buffer outlives the thread that made it, and terminating a worker mid-loop breaks nothing'),
  async (t) => {
    const child = await runFixture('buffer-lifetime.ts', { nodeArgs: ['--expose-gc'] });
    t.is(child.code, 0, child.stderr);
    const result = JSON.parse(child.stdout) as Record<string, number>;
    t.like(result, { makerExit: 0, spinnerExit: 1, a: 6 });
    t.true(result.b! > 0);
    t.is(result.bAfter, result.b! + 1);
  },
);

test(title('sketches over a buffer merge, serialize and close like heap sketches'), (t) => {
  const buffer = Estimator.createSharedBuffer({ hashes: 2, slots: 128, seed: 9n });
  const shared = Estimator.fromSharedBuffer(buffer, { hashes: 2, slots: 128, seed: 9 });
  const local = new Estimator({ hashes: 2, slots: 128, seed: 9n });
  shared.incr('a', 4);
  local.incr('a', 3);
  local.incr('b', 1);
  t.deepEqual([shared.hashes, shared.slots, shared.seed, shared.byteLength], [2, 128, 9n, 28 + 8 * 256]);
  shared.merge(local);
  t.deepEqual([shared.get('a'), shared.get('b')], [7, 1]);
  local.merge(shared);
  t.deepEqual([local.get('a'), local.get('b')], [10, 2]);
  t.deepEqual(Estimator.deserialize(shared.serialize()).counterIndexes('a'), shared.counterIndexes('a'));
  t.is(Estimator.deserialize(shared.serialize()).get('a'), 7);
  shared.close();
  t.throws(() => shared.get('a'), { code: 'ERR_KEEPCOUNT_CLOSED' });
  const again = Estimator.fromSharedBuffer(buffer);
  t.is(again.get('a'), 7);
  again.reset();
  t.is(again.get('a'), 0);
});

test(title('rates over one buffer on the default clock count together'), (t) => {
  const buffer = Rate.createSharedBuffer({ intervalMs: 60_000 });
  const a = Rate.fromSharedBuffer(buffer);
  const b = Rate.fromSharedBuffer(buffer, { intervalMs: 60_000 });
  t.is(a.intervalMs, 60_000);
  t.is(a.observe('k', 2), 2);
  t.is(b.observe('k', 3), 5);
  const window = b.observeWindow('k', 0);
  t.is(window.count, 5);
  // A 60 s interval that started within this test: well over 59 s remain.
  t.true(window.resetMs > 59_000 && window.resetMs <= 60_000, `${window.resetMs}`);
  a.close();
  t.is(
    b.rateWith('k', (c) => c.currSamples),
    5,
  );
});

test(title('a reading taken just before another thread began the interval is no time passed, not idleness'), (t) => {
  // Thread y reads its clock at 999.9 ms; thread x reads 1001, ends the interval and starts the
  // next; then y's call reaches the buffer. Taken for an interval start long past, y's call
  // cleared the interval that had just ended, marked it stale and moved the start back.
  const buffer = Rate.createSharedBuffer({ intervalMs: 1000, hashes: 2, slots: 64, seed: 1n });
  const clock = new ManualClock();
  const x = Rate.fromSharedBuffer(buffer, { clock });
  let reading = 0;
  const y = Rate.fromSharedBuffer(buffer, { clock: { now: () => reading } });
  clock.advance(500);
  x.observe('k', 10);
  clock.advance(501);
  const ended = (rate: Rate) => rate.rateWith('k', (c) => [c.prevSamples, c.currSamples]);
  t.deepEqual(ended(x), [10, 0], 'x ended the interval');
  reading = 999.9;
  t.is(y.observe('other', 1), 1, "y's event counts in the interval under way");
  t.deepEqual(ended(x), [10, 0], 'the interval that ended is whole');
  t.is(x.rate('k'), 10);
  t.true(x.observeWindow('k', 0).resetMs > 990, 'the interval still started at 1001 ms');
  // Far ahead (another clock's origin, not a thread a moment behind) still reads as long past.
  reading = 0;
  y.observe('other', 1);
  t.deepEqual(ended(x), [0, 0], 'stale after a start 1001 ms ahead');
});

test(title('bad buffers and options are refused with the same errors on both backends'), (t) => {
  const estimator = Estimator.createSharedBuffer({ hashes: 2, slots: 64, seed: 5n });
  const rate = Rate.createSharedBuffer({ intervalMs: 250, hashes: 2, slots: 64, seed: 5n });
  t.is(estimator.byteLength, 128 + 8 * 2 * 64);
  t.is(rate.byteLength, 128 + 16 * 2 * 64);
  for (const notShared of [new ArrayBuffer(1152), new Uint8Array(1152), undefined, 'buffer']) {
    throwsShape(t, () => Estimator.fromSharedBuffer(notShared as unknown as SharedArrayBuffer), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "buffer" argument must be an instance of SharedArrayBuffer\. Received /,
    });
  }
  for (const bytes of [0, 100, 1153]) {
    throwsShape(t, () => Rate.fromSharedBuffer(new SharedArrayBuffer(bytes)), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message:
        'The "buffer" argument must be a multiple of 8 bytes long, at least the 128 of the header ' +
        `(made by createSharedBuffer). Received a SharedArrayBuffer of ${bytes} bytes`,
    });
  }
  const corrupt = (check: string, detail: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CORRUPT',
    message: `The shared buffer is not a keepcount buffer (${check} check failed): ${detail}`,
  });
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(new SharedArrayBuffer(1152)),
    corrupt('magic', 'it does not start with "KCSHARED"; found 0x0000000000000000'),
  );
  const damaged = copy(estimator);
  new Uint8Array(damaged)[16] = 3;
  throwsShape(t, () => Estimator.fromSharedBuffer(damaged), {
    ...corrupt('checksum', ''),
    message:
      /^The shared buffer is not a keepcount buffer \(checksum check failed\): the stored CRC-32 0x[0-9a-f]{8} does not match the header$/,
  });
  const version = copy(estimator);
  // Version 1 segments hashed keys with SipHash-1-3 (sketch format 2): their counters sit elsewhere.
  new Uint8Array(version)[8] = 1;
  throwsShape(t, () => Estimator.fromSharedBuffer(version), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: 'The shared buffer was made by another version of keepcount, with layout 1 where this one reads layout 5',
  });
  const short = new SharedArrayBuffer(estimator.byteLength - 8);
  new Uint8Array(short).set(new Uint8Array(estimator, 0, short.byteLength));
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(short),
    corrupt(
      'length',
      `the buffer is ${short.byteLength} bytes; its length field says ${estimator.byteLength}, and its shape takes ${estimator.byteLength}`,
    ),
  );
  // A length field alone gone wrong, resealed: the message names the field's value, not the shape's.
  const field = copy(estimator);
  const fieldView = new DataView(field);
  fieldView.setBigUint64(48, 0n, true);
  fieldView.setUint32(60, crc32(new Uint8Array(field), 60), true);
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(field),
    corrupt(
      'length',
      `the buffer is ${field.byteLength} bytes; its length field says 0, and its shape takes ${field.byteLength}`,
    ),
  );
  const mismatch = (message: string) => ({ instanceOf: Error, code: 'ERR_KEEPCOUNT_MISMATCH', message });
  // An option that differs says what to do; another kind is another call, not another option.
  const same = "every thread must pass the options it was created with, or leave them out to take the buffer's";
  throwsShape(
    t,
    () => Rate.fromSharedBuffer(estimator),
    mismatch('The shared buffer was created with kind estimator, not rate as requested'),
  );
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(rate),
    mismatch('The shared buffer was created with kind rate, not estimator as requested'),
  );
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(estimator, { hashes: 3 }),
    mismatch(`The shared buffer was created with hashes 2, not 3 as requested: ${same}`),
  );
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(estimator, { slots: 65 }),
    mismatch(`The shared buffer was created with slots 64, not 65 as requested: ${same}`),
  );
  throwsShape(
    t,
    () => Estimator.fromSharedBuffer(estimator, { seed: 6n }),
    mismatch(
      `The shared buffer was created with another seed than the one requested (seeds are secret: neither is shown): ${same}`,
    ),
  );
  throwsShape(
    t,
    () => Rate.fromSharedBuffer(rate, { intervalMs: 1000 }),
    mismatch(`The shared buffer was created with intervalMs 250, not 1000 as requested: ${same}`),
  );
  throwsShape(t, () => Estimator.fromSharedBuffer(estimator, { seed: -1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "seed" option must be a safe integer >= 0 when it is a number. Received -1',
  });
  throwsShape(t, () => Rate.fromSharedBuffer(rate, { clock: {} as ManualClock }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "clock" option must be an object with a now() method. Received an instance of Object',
  });
  throwsShape(t, () => Estimator.createSharedBuffer({ hashes: 33 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "hashes" option must be an integer in [1, 32]. Received 33',
  });
  // The buffer keeps the interval in 64-bit nanoseconds: 584 years at most.
  throwsShape(t, () => Rate.createSharedBuffer({ intervalMs: 18446744073710 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "intervalMs" option must be an integer in [1, 18446744073709]. Received 18446744073710',
  });
  throwsShape(t, () => Rate.createSharedBuffer({} as { intervalMs: number }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "intervalMs" option must be of type number. Received undefined',
  });
});

test(title('an in-flight segment copied into a buffer is a kind mismatch, not a damaged buffer'), (t) => {
  // Layout 5's in-flight file: the total and 2 processes' sketches of 1 × 8 counters end at byte
  // 320, a cache line; then one 64-byte slot per process. Built by hand, so both backends read it.
  const bytes = 128 + 3 * 8 * 8 + 2 * 64;
  const inflight = new SharedArrayBuffer(bytes);
  new Uint8Array(inflight).set(new Uint8Array(Estimator.createSharedBuffer({ hashes: 1, slots: 8, seed: 5n }), 0, 64));
  const view = new DataView(inflight);
  view.setUint32(12, 3, true);
  view.setBigUint64(48, BigInt(bytes), true);
  view.setUint32(56, 2, true);
  view.setUint32(60, crc32(new Uint8Array(inflight), 60), true);
  const kind = (requested: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: `The shared buffer was created with kind in-flight, not ${requested} as requested`,
  });
  throwsShape(t, () => Estimator.fromSharedBuffer(inflight), kind('estimator'));
  throwsShape(t, () => Rate.fromSharedBuffer(inflight), kind('rate'));
  if (backend === 'fallback') return;
  // The file Inflight.openShared makes is that long: what a user would copy.
  const dir = mkdtempSync(join(tmpdir(), 'keepcount-sab-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  Inflight.openShared('copied', { seed: 5n, dir, hashes: 1, slots: 8, processes: 2 }).close();
  const file = readFileSync(join(dir, 'keepcount.copied'));
  t.is(file.length, bytes);
  const copied = new SharedArrayBuffer(file.length);
  new Uint8Array(copied).set(file);
  throwsShape(t, () => Rate.fromSharedBuffer(copied), kind('rate'));
});

/** A copy of `buffer` in a new SharedArrayBuffer. */
function copy(buffer: SharedArrayBuffer): SharedArrayBuffer {
  const out = new SharedArrayBuffer(buffer.byteLength);
  new Uint8Array(out).set(new Uint8Array(buffer));
  return out;
}

test(
  title('a shared Rate on a wall-clock time base gives the same window on both backends, its end never 0 ms away'),
  (t) => {
    // Date.now()-sized readings pass 2^53 ns: the fallback rounded the interval's elapsed fraction
    // and could say the window ended 0 ms from now, where the native backend floors whole
    // milliseconds. Both now floor the same nanoseconds (the figures are this test's golden values).
    const seen: Record<number, number[]> = {};
    for (const intervalMs of [1, 10, 1000]) {
      const clock = new ManualClock(1_764_245_000_000);
      const rate = Rate.fromSharedBuffer(Rate.createSharedBuffer({ intervalMs, hashes: 1, slots: 16, seed: 1n }), {
        clock,
      });
      seen[intervalMs] = [];
      for (let i = 0; i < 12; i++) {
        const { resetMs } = rate.observeWindow('client');
        t.true(resetMs >= 1 && resetMs <= intervalMs, `resetMs ${resetMs} of ${intervalMs}`);
        seen[intervalMs]!.push(resetMs);
        clock.advance(i % 3 === 2 ? 0.4 : 1);
      }
    }
    t.deepEqual(seen, {
      1: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
      10: [10, 10, 9, 9, 7, 6, 6, 6, 4, 3, 2, 2],
      1000: [1000, 1000, 999, 999, 997, 996, 996, 996, 994, 993, 992, 992],
    });
  },
);
