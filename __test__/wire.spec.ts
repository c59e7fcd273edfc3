import test from 'ava';
import { crc32 } from 'node:zlib';
import { Estimator } from '../lib/index.js';
import { rejectsShape, throwsShape, title } from './helpers.js';

const corrupt = (message: string | RegExp) => ({ instanceOf: Error, code: 'ERR_KEEPCOUNT_CORRUPT', message });

function small(): Estimator {
  const e = new Estimator({ hashes: 2, slots: 3, seed: 0x0123456789abcdefn });
  e.incr('a', 5);
  e.incr(7, -2);
  e.incr(Buffer.from('bytes'), Number.MAX_SAFE_INTEGER);
  return e;
}

/** Rewrites the checksum so a test reaches the check it targets. */
function reseal(bytes: Uint8Array): Uint8Array {
  new DataView(bytes.buffer, bytes.byteOffset).setUint32(bytes.length - 4, crc32(bytes.subarray(0, -4)), true);
  return bytes;
}

test(title('serializes to the version-3 layout'), (t) => {
  const bytes = small().serialize();
  t.is(bytes.length, 28 + 8 * 6);
  t.deepEqual(
    Buffer.from(bytes.subarray(0, 24)).toString('hex'),
    '4b43434d' + '0300' + '0000' + '02000000' + '03000000' + 'efcdab8967452301',
  );
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  t.is(view.getUint32(bytes.length - 4, true), crc32(bytes.subarray(0, -4)));
  const counters = Array.from({ length: 6 }, (_, i) => view.getBigInt64(24 + 8 * i, true));
  t.is(
    counters.reduce((a, b) => a + b, 0n),
    2n * (5n - 2n + BigInt(Number.MAX_SAFE_INTEGER)),
  );
});

test(title('round-trips through deserialize with identical estimates, bytes and seed'), (t) => {
  const e = small();
  const copy = Estimator.deserialize(e.serialize());
  t.is(copy.hashes, 2);
  t.is(copy.slots, 3);
  t.is(copy.seed, 0x0123456789abcdefn);
  for (const key of ['a', 7, Buffer.from('bytes'), 'missing']) t.is(copy.get(key), e.get(key));
  t.deepEqual(copy.serialize(), e.serialize());
  copy.merge(e);
  t.is(copy.get('a'), 2 * e.get('a'));
  const offset = new Uint8Array(e.byteLength + 5);
  offset.set(e.serialize(), 5);
  t.deepEqual(Estimator.deserialize(offset.subarray(5)).serialize(), e.serialize());
});

test(title('refuses every truncation with the check it fails'), (t) => {
  const bytes = small().serialize();
  for (let n = 0; n < bytes.length; n++) {
    const message =
      n < 28
        ? `Serialized sketch is ${n} bytes, shorter than the 28 bytes of header and checksum`
        : `Serialized sketch is ${n} bytes; a 2×3 sketch is exactly 76 bytes`;
    throwsShape(t, () => Estimator.deserialize(bytes.slice(0, n)), corrupt(message));
  }
  throwsShape(
    t,
    () => Estimator.deserialize(Uint8Array.of(...bytes, 0)),
    corrupt('Serialized sketch is 77 bytes; a 2×3 sketch is exactly 76 bytes'),
  );
});

test(title('refuses a bad magic, version, flags or shape, checked in that order'), (t) => {
  const patch = (at: number, values: number[]) => {
    const bytes = small().serialize();
    bytes.set(values, at);
    return reseal(bytes);
  };
  throwsShape(
    t,
    () => Estimator.deserialize(patch(0, [0x4b, 0x43, 0x43, 0x4e])),
    corrupt('Serialized sketch does not start with the magic "KCCM" (0x4b43434d); found 0x4b43434e'),
  );
  throwsShape(
    t,
    () => Estimator.deserialize(patch(4, [4, 0])),
    corrupt('Serialized sketch has format version 4; this keepcount reads version 3'),
  );
  for (const retired of [1, 2]) {
    throwsShape(
      t,
      () => Estimator.deserialize(patch(4, [retired, 0])),
      corrupt(
        `Serialized sketch has format version ${retired}, which is no longer read: it put keys in other counters ` +
          '(docs/format.md, version history); this keepcount reads version 3, so rebuild the sketch',
      ),
    );
  }
  throwsShape(
    t,
    () => Estimator.deserialize(patch(6, [1, 0])),
    corrupt('Serialized sketch has flags 0x0001; version 3 requires 0'),
  );
  const shape = (h: number, s: number) =>
    corrupt(
      `Serialized sketch has shape ${h} hashes × ${s} slots, outside the limits (1 to 32 hashes, 1 to 134217728 counters)`,
    );
  throwsShape(t, () => Estimator.deserialize(patch(8, [0, 0, 0, 0])), shape(0, 3));
  throwsShape(t, () => Estimator.deserialize(patch(8, [33, 0, 0, 0])), shape(33, 3));
  throwsShape(t, () => Estimator.deserialize(patch(12, [0, 0, 0, 0])), shape(2, 0));
  throwsShape(t, () => Estimator.deserialize(patch(12, [1, 0, 0, 4])), shape(2, 67108865));
  throwsShape(t, () => Estimator.deserialize(patch(12, [0xff, 0xff, 0xff, 0xff])), shape(2, 4294967295));
  // Several faults at once: the earliest check in the spec's order wins.
  const many = patch(4, [9, 0, 1, 0, 0, 0, 0, 0]);
  throwsShape(t, () => Estimator.deserialize(many), corrupt(/format version 9/));
  // A valid shape with a length that does not match it.
  throwsShape(
    t,
    () => Estimator.deserialize(patch(12, [4, 0, 0, 0])),
    corrupt('Serialized sketch is 76 bytes; a 2×4 sketch is exactly 92 bytes'),
  );
});

test(title('detects any flipped bit by its checksum'), (t) => {
  const bytes = small().serialize();
  // Bits of the header fields would fail earlier checks; flip every bit of the seed, counters and CRC.
  for (let i = 16; i < bytes.length; i++) {
    for (let bit = 0; bit < 8; bit++) {
      const flipped = bytes.slice();
      flipped[i]! ^= 1 << bit;
      throwsShape(
        t,
        () => Estimator.deserialize(flipped),
        corrupt(/^Serialized sketch fails its CRC-32 check: the stored 0x[0-9a-f]{8} does not match the contents$/),
      );
    }
  }
});

test(title('deserialize refuses what is not a Uint8Array'), async (t) => {
  for (const [value, received] of [
    ['KCCM', 'type string ("KCCM")'],
    [new ArrayBuffer(28), 'an instance of ArrayBuffer'],
    [[1, 2], 'an instance of Array'],
  ] as const) {
    throwsShape(t, () => Estimator.deserialize(value as never), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: `The "bytes" argument must be an instance of Uint8Array. Received ${received}`,
    });
  }
  await rejectsShape(
    t,
    Promise.resolve().then(() => Estimator.deserialize(new Uint8Array(0))),
    corrupt(/28 bytes/),
  );
});
