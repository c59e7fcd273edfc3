import test from 'ava';
import { runInNewContext } from 'node:vm';
import { Estimator } from '../lib/index.js';
import { title, throwsShape } from './helpers.js';

const MAX = Number.MAX_SAFE_INTEGER;

test(title('counts increments and decrements per key'), (t) => {
  const e = new Estimator({ seed: 7n });
  t.is(e.incr('a'), 1);
  t.is(e.incr('a', 4), 5);
  t.is(e.decr('a'), 4);
  t.is(e.decr('a', 2), 2);
  t.is(e.get('a'), 2);
  t.is(e.get('never seen'), 0);
  t.is(e.incr('a', -2), 0);
});

test(title('uses 4 hashes × 8192 slots and a random seed by default'), (t) => {
  const a = new Estimator();
  const b = new Estimator();
  t.is(a.hashes, 4);
  t.is(a.slots, 8192);
  t.is(a.byteLength, 28 + 8 * 4 * 8192);
  t.is(typeof a.seed, 'bigint');
  t.true(a.seed >= 0n && a.seed < 2n ** 64n);
  t.not(a.seed, b.seed);
});

test(title('takes the shape and seed it is given'), (t) => {
  const e = new Estimator({ hashes: 3, slots: 100, seed: 2n ** 64n - 1n });
  t.is(e.hashes, 3);
  t.is(e.slots, 100);
  t.is(e.seed, 2n ** 64n - 1n);
  t.is(new Estimator({ seed: 12 }).seed, 12n);
  t.is(new Estimator({ hashes: 32, slots: 4194304, seed: 1n }).slots, 4194304);
  t.is(e.byteLength, e.serialize().length);
});

test(title('treats 1 and 1n, 0 and -0, lone surrogates and U+FFFD as the same keys'), (t) => {
  const e = new Estimator({ seed: 1n });
  e.incr(1);
  t.is(e.get(1n), 1);
  e.incr(-0);
  t.is(e.get(0n), 1);
  e.incr(-(2n ** 63n));
  t.is(e.get(-(2n ** 63n)), 1);
  e.incr('x\ud800y');
  t.is(e.get('x\ufffdy'), 1);
});

test(title('hashes strings and bytes differently, Buffers and Uint8Arrays (any realm) alike'), (t) => {
  const e = new Estimator({ seed: 3n });
  e.incr('abc');
  t.is(e.get(new TextEncoder().encode('abc')), 0);
  e.incr(Buffer.from('xyz'));
  t.is(e.get(new Uint8Array([0x78, 0x79, 0x7a])), 1);
  t.is(e.get(runInNewContext('new Uint8Array([0x78, 0x79, 0x7a])') as Uint8Array), 1);
  e.incr(new Uint8Array(0));
  t.is(e.get(Buffer.alloc(0)), 1);
  const big = 'é'.repeat(5000) + 'a';
  e.incr(big);
  t.is(e.get(big), 1);
});

test(title('is exact up to Number.MAX_SAFE_INTEGER'), (t) => {
  const e = new Estimator({ seed: 5n });
  t.is(e.incr('k', MAX), MAX);
  t.is(e.decr('k', MAX), 0);
  t.is(e.incr('k', -MAX), -MAX);
  t.is(Estimator.deserialize(e.serialize()).get('k'), -MAX);
});

test(title('counts saturate at ±2^63 instead of wrapping'), (t) => {
  const e = new Estimator({ hashes: 2, slots: 16, seed: 5n });
  for (let i = 0; i < 1025; i++) e.incr('k', MAX);
  t.is(e.get('k'), 2 ** 63);
  const f = new Estimator({ hashes: 2, slots: 16, seed: 5n });
  for (let i = 0; i < 1025; i++) f.incr('k', -MAX);
  t.is(f.get('k'), -(2 ** 63));
  t.is(Estimator.deserialize(e.serialize()).get('k'), 2 ** 63);
});

test(title('reset forgets every count'), (t) => {
  const e = new Estimator({ seed: 9n });
  e.incr('a', 3);
  e.incr(42, 5);
  e.reset();
  t.is(e.get('a'), 0);
  t.is(e.get(42), 0);
  t.deepEqual(e.serialize(), new Estimator({ seed: 9n }).serialize());
});

test(title("merge equals making both sketches' increments in one"), (t) => {
  const options = { hashes: 4, slots: 64, seed: 11n };
  const a = new Estimator(options);
  const b = new Estimator(options);
  const both = new Estimator(options);
  for (let i = 0; i < 200; i++) {
    const key = i % 3 === 0 ? `k${i % 17}` : i;
    (i % 2 === 0 ? a : b).incr(key, i);
    both.incr(key, i);
  }
  a.merge(b);
  t.deepEqual(a.serialize(), both.serialize());
  t.is(a.get('k3'), both.get('k3'));
});

test(title('merge refuses sketches of another shape or seed'), (t) => {
  const a = new Estimator({ hashes: 4, slots: 64, seed: 1n });
  const shape = {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: 'Cannot merge a 4×64 sketch into a 4×64 sketch with another seed: hashes, slots and seed must be equal',
  };
  throwsShape(t, () => a.merge(new Estimator({ hashes: 4, slots: 64, seed: 2n })), shape);
  throwsShape(t, () => a.merge(new Estimator({ hashes: 3, slots: 64, seed: 1n })), {
    ...shape,
    message: 'Cannot merge a 3×64 sketch into a 4×64 sketch: hashes, slots and seed must be equal',
  });
  throwsShape(t, () => a.merge(new Estimator({ hashes: 4, slots: 65, seed: 1n })), {
    ...shape,
    message: /^Cannot merge a 4×65 sketch/,
  });
  throwsShape(t, () => a.merge({} as Estimator), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "other" argument must be an instance of Estimator. Received an instance of Object',
  });
});

test(title('fromErrorBounds sizes the sketch as Cormode & Muthukrishnan'), (t) => {
  const e = Estimator.fromErrorBounds({ epsilon: 0.001, delta: 0.01, seed: 4n });
  t.is(e.slots, Math.ceil(Math.E / 0.001));
  t.is(e.hashes, Math.ceil(Math.log(100)));
  t.is(e.seed, 4n);
  t.is(Estimator.fromErrorBounds({ epsilon: 0.5, delta: 0.9 }).hashes, 1);
});

test(title('fromErrorBounds refuses bounds outside (0, 1) and shapes past the limits'), (t) => {
  for (const epsilon of [0, 1, -0.5, NaN, Infinity]) {
    throwsShape(t, () => Estimator.fromErrorBounds({ epsilon, delta: 0.1 }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: `The "epsilon" option must be a number in (0, 1). Received ${Object.is(epsilon, -0) ? '-0' : epsilon}`,
    });
  }
  throwsShape(t, () => Estimator.fromErrorBounds({ epsilon: 0.1, delta: 1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "delta" option must be a number in (0, 1). Received 1',
  });
  throwsShape(t, () => Estimator.fromErrorBounds({ epsilon: '0.1', delta: 0.1 } as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "epsilon" option must be of type number. Received type string ("0.1")',
  });
  throwsShape(t, () => Estimator.fromErrorBounds({ epsilon: 0.1, delta: 1e-20 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "delta" option must be at least e^-32 (at most 32 hashes). Received 1e-20',
  });
  throwsShape(t, () => Estimator.fromErrorBounds({ epsilon: 1e-9, delta: 0.1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "epsilon" option must be large enough for 3 × ceil(e / epsilon) <= 134217728 counters. Received 1e-9',
  });
  throwsShape(t, () => Estimator.fromErrorBounds(undefined as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "epsilon" option must be of type number. Received undefined',
  });
});

test(title('refuses shapes outside the limits'), (t) => {
  const range = { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' };
  const cases: [object, string][] = [
    [{ slots: 0 }, 'The "slots" option must be an integer in [1, 134217728]. Received 0'],
    [{ slots: -1 }, 'The "slots" option must be an integer in [1, 134217728]. Received -1'],
    [{ slots: 1.5 }, 'The "slots" option must be an integer in [1, 134217728]. Received 1.5'],
    [{ slots: NaN }, 'The "slots" option must be an integer in [1, 134217728]. Received NaN'],
    [{ slots: 2 ** 40 }, 'The "slots" option must be an integer in [1, 134217728]. Received 1099511627776'],
    [{ hashes: 0 }, 'The "hashes" option must be an integer in [1, 32]. Received 0'],
    [{ hashes: 33 }, 'The "hashes" option must be an integer in [1, 32]. Received 33'],
    [{ hashes: Infinity }, 'The "hashes" option must be an integer in [1, 32]. Received Infinity'],
    [
      { hashes: 4, slots: 2 ** 26 },
      'The "slots" option must be at most 33554432 with 4 hashes (hashes × slots <= 134217728). Received 67108864',
    ],
    [{ seed: -1 }, 'The "seed" option must be a safe integer >= 0 when it is a number. Received -1'],
    [
      { seed: 2 ** 60 },
      'The "seed" option must be a safe integer >= 0 when it is a number. Received 1152921504606847000',
    ],
    [{ seed: 0.5 }, 'The "seed" option must be a safe integer >= 0 when it is a number. Received 0.5'],
    [{ seed: -1n }, 'The "seed" option must be in [0, 2^64) when it is a bigint. Received -1n'],
    [{ seed: 2n ** 64n }, 'The "seed" option must be in [0, 2^64) when it is a bigint. Received 18446744073709551616n'],
  ];
  for (const [options, message] of cases) throwsShape(t, () => new Estimator(options), { ...range, message });
});

test(title('refuses options of the wrong type'), (t) => {
  const type = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' };
  throwsShape(t, () => new Estimator({ slots: '8' } as never), {
    ...type,
    message: 'The "slots" option must be of type number. Received type string ("8")',
  });
  throwsShape(t, () => new Estimator({ hashes: 4n } as never), {
    ...type,
    message: 'The "hashes" option must be of type number. Received 4n',
  });
  throwsShape(t, () => new Estimator({ seed: '1' } as never), {
    ...type,
    message: 'The "seed" option must be of type bigint or number. Received type string ("1")',
  });
  throwsShape(t, () => new Estimator(null as never), {
    ...type,
    message: 'The "options" argument must be of type object. Received null',
  });
  throwsShape(t, () => new Estimator(5 as never), {
    ...type,
    message: 'The "options" argument must be of type object. Received 5',
  });
});

test(title('refuses keys of the wrong type or out of range'), (t) => {
  const e = new Estimator({ seed: 1n });
  const type = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' };
  const range = { instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE' };
  const expected = 'The "key" argument must be of type string, number, bigint or Uint8Array. Received';
  const badTypes: [unknown, string][] = [
    [true, 'type boolean (true)'],
    [null, 'null'],
    [undefined, 'undefined'],
    [{}, 'an instance of Object'],
    [Symbol('s'), 'type symbol (Symbol(s))'],
    [new Uint16Array(2), 'an instance of Uint16Array'],
    [new ArrayBuffer(2), 'an instance of ArrayBuffer'],
    [() => 1, 'function <anonymous>'],
  ];
  for (const [key, received] of badTypes) {
    const calls = [
      () => e.incr(key as never),
      () => e.get(key as never),
      () => e.decr(key as never),
      () => e.counterIndexes(key as never),
    ];
    for (const call of calls) {
      throwsShape(t, call, { ...type, message: `${expected} ${received}` });
    }
  }
  for (const key of [1.5, NaN, Infinity, 2 ** 53, -(2 ** 53)]) {
    throwsShape(t, () => e.incr(key), {
      ...range,
      message: `The "key" argument must be a safe integer when it is a number. Received ${key}`,
    });
  }
  for (const key of [2n ** 63n, -(2n ** 63n) - 1n]) {
    for (const call of [() => e.get(key), () => e.counterIndexes(key)]) {
      throwsShape(t, call, {
        ...range,
        message: `The "key" argument must be in the i64 range when it is a bigint. Received ${key}n`,
      });
    }
  }
});

test(title('refuses values that are not safe integers'), (t) => {
  const e = new Estimator({ seed: 1n });
  for (const value of [1.5, NaN, Infinity, -Infinity, 2 ** 53]) {
    for (const call of [() => e.incr('k', value), () => e.decr('k', value)]) {
      throwsShape(t, call, {
        instanceOf: RangeError,
        code: 'ERR_OUT_OF_RANGE',
        message: `The "value" argument must be a safe integer. Received ${value}`,
      });
    }
  }
  throwsShape(t, () => e.incr('k', '1' as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "value" argument must be of type number. Received type string ("1")',
  });
  t.is(e.get('k'), 0);
});

test(title('deserialize of bytes on a detached buffer is ERR_KEEPCOUNT_CORRUPT'), (t) => {
  // A copy: native serialize() may return memory that cannot be detached.
  const bytes = new Uint8Array(new Estimator({ seed: 8n }).serialize());
  structuredClone(bytes.buffer, { transfer: [bytes.buffer] });
  throwsShape(t, () => Estimator.deserialize(bytes), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CORRUPT',
    message: 'Serialized sketch is 0 bytes, shorter than the 28 bytes of header and checksum',
  });
});
