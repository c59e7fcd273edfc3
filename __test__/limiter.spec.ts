import test from 'ava';
import { backend, Limiter, ManualClock, type Quota } from '../lib/index.js';
import { hrtimeCalls, throwsShape, title } from './helpers.js';
import { hostClockPassed } from './waits.js';

const requests = (perSecond: number, burst: number): Quota => ({ requests: { perSecond, burst } });
const units = (perSecond: number, burst: number): Quota => ({ units: { perSecond, burst } });
const DENY_ALL = requests(0, 0);

const setup = (bestEffort: Quota = DENY_ALL, keys: [string | number | bigint | Uint8Array, Quota][] = []) => {
  const clock = new ManualClock();
  return { clock, limiter: new Limiter({ bestEffort, keys, clock }) };
};

/** Admitted checks of `key` (cost 1) until the first refusal. */
const drain = (limiter: Limiter, key: string | number | bigint | Uint8Array): number => {
  let n = 0;
  while (limiter.check(key).allowed) n++;
  return n;
};

const refused = (retryAfterMs: number) => ({ allowed: false, retryAfterMs });
const ALLOWED = { allowed: true };

test(title('bursts, then refills exactly on the clock'), (t) => {
  const { clock, limiter } = setup(DENY_ALL, [['k', requests(1, 3)]]);
  for (let i = 0; i < 3; i++) t.deepEqual(limiter.check('k'), ALLOWED);
  t.deepEqual(limiter.check('k'), refused(1000));
  clock.advance(500);
  t.deepEqual(limiter.check('k'), refused(500));
  clock.advance(499.5);
  t.deepEqual(limiter.check('k'), refused(0.5));
  clock.advance(0.5);
  t.deepEqual(limiter.check('k'), ALLOWED);
  t.deepEqual(limiter.check('k'), refused(1000));
  // A long idle refills to the burst, no further.
  clock.advance(3_600_000);
  t.is(drain(limiter, 'k'), 3);
});

test(title('without a clock, buckets refill on the host clock, which the native core reads itself'), async (t) => {
  // One token every 100 ms, one held.
  const limiter = new Limiter({ bestEffort: requests(10, 1) });
  const made = process.hrtime.bigint();
  t.deepEqual(limiter.check('a'), { allowed: true });
  const refused = limiter.check('a');
  t.false(refused.allowed);
  const wait = refused.allowed ? 0 : refused.retryAfterMs;
  t.true(wait > 0 && wait <= 100, `retryAfterMs ${wait}`);
  await hostClockPassed(made, 150);
  t.deepEqual(limiter.check('a'), { allowed: true });
  // Checking on the host clock takes no clock call from JavaScript on the native backend; the
  // fallback's core reads process.hrtime() itself, once per call.
  const calls = hrtimeCalls(() => {
    for (let i = 0; i < 10; i++) limiter.check('b');
  });
  t.is(calls, backend === 'native' ? 0 : 10);
});

test(title('waits are exact to the nanosecond: a third of a second is 333.333334 ms'), (t) => {
  const { clock, limiter } = setup(DENY_ALL, [['k', requests(3, 1)]]);
  t.true(limiter.check('k').allowed);
  t.deepEqual(limiter.check('k'), refused(333.333334));
  clock.advance(333.333333);
  t.false(limiter.check('k').allowed);
});

test(title('limits cost units, and a cost above the burst is never admitted'), (t) => {
  const { limiter } = setup(units(1000, 1500));
  t.deepEqual(limiter.check(7, 1000), ALLOWED);
  t.deepEqual(limiter.check(7, 600), refused(100));
  t.deepEqual(limiter.check(7, 2000), refused(Infinity));
  t.deepEqual(limiter.check(7, 0), ALLOWED);
});

test(title('the longer wait of the two dimensions wins'), (t) => {
  const both: Quota = { requests: { perSecond: 1, burst: 1 }, units: { perSecond: 100, burst: 100 } };
  const { clock, limiter } = setup(DENY_ALL, [['k', both]]);
  t.deepEqual(limiter.check('k', 100), ALLOWED);
  t.deepEqual(limiter.check('k', 50), refused(1000));
  clock.advance(1000);
  t.deepEqual(limiter.check('k', 100), ALLOWED);
});

test(title('a period in milliseconds: one token every two seconds'), (t) => {
  const { clock, limiter } = setup({ requests: { amount: 1, periodMs: 2000, burst: 1 } });
  t.true(limiter.check('x').allowed);
  t.deepEqual(limiter.check('x'), refused(2000));
  clock.advance(1999);
  t.deepEqual(limiter.check('x'), refused(1));
  clock.advance(1);
  t.true(limiter.check('x').allowed);
  t.deepEqual(limiter.bestEffort, { requests: { amount: 1, periodMs: 2000, burst: 1 } });
});

test(title('a zero rate allows the burst once and then never'), (t) => {
  const { clock, limiter } = setup(requests(0, 2));
  t.is(drain(limiter, 'x'), 2);
  clock.advance(1e9);
  t.deepEqual(limiter.check('x'), refused(Infinity));
});

test(title('unknown keys share one best-effort bucket'), (t) => {
  const { limiter } = setup(requests(1, 2), [['alice', requests(1, 1)]]);
  t.true(limiter.check('bob').allowed);
  t.true(limiter.check('carol').allowed);
  t.deepEqual(limiter.check('dave'), refused(1000));
  t.true(limiter.check('alice').allowed);
});

test(title('the overall quota spans every key, and its refusal takes nothing from the key'), (t) => {
  const clock = new ManualClock();
  const limiter = new Limiter({
    bestEffort: requests(0, 10),
    overall: requests(0, 2),
    keys: [['a', requests(0, 5)]],
    clock,
  });
  t.deepEqual(limiter.overall, { requests: { amount: 0, periodMs: 1000, burst: 2 } });
  t.true(limiter.check('a').allowed);
  t.true(limiter.check('b').allowed);
  t.deepEqual(limiter.check('a'), refused(Infinity));
  limiter.setOverall(undefined);
  t.is(limiter.overall, undefined);
  t.is(drain(limiter, 'a'), 4);
  // Set again where there was none: starts full.
  limiter.setOverall(requests(0, 1));
  t.true(limiter.check('b').allowed);
  t.false(limiter.check('b').allowed);
});

test(title('a smaller burst caps held tokens, and quota() reports the new quota'), (t) => {
  const { limiter } = setup(DENY_ALL, [['k', requests(0, 10)]]);
  t.is(limiter.check('k', 0).allowed, true);
  for (let i = 0; i < 2; i++) limiter.check('k');
  limiter.setQuota('k', requests(0, 5));
  t.deepEqual(limiter.quota('k'), { requests: { amount: 0, periodMs: 1000, burst: 5 } });
  t.is(drain(limiter, 'k'), 5);
});

test(title('a rate change applies from the moment it is made'), (t) => {
  const { clock, limiter } = setup(DENY_ALL, [['k', requests(1, 1)]]);
  t.true(limiter.check('k').allowed);
  clock.advance(500); // half a token at the old rate
  limiter.setQuota('k', requests(2, 1));
  t.deepEqual(limiter.check('k'), refused(250));
});

test(title('the best-effort quota changes in place, keeping its tokens'), (t) => {
  const { limiter } = setup(requests(0, 5));
  t.is(limiter.check('x').allowed, true);
  limiter.setBestEffort(requests(0, 2));
  t.is(drain(limiter, 'y'), 2);
  limiter.setBestEffort(requests(0, 9));
  t.is(drain(limiter, 'y'), 0);
});

test(title('replacing the table keeps stayers, fills newcomers and drops leavers to best effort'), (t) => {
  const { limiter } = setup(DENY_ALL, [
    ['stay', requests(0, 3)],
    ['leave', requests(0, 3)],
  ]);
  t.is(drain(limiter, 'stay'), 3);
  t.is(drain(limiter, 'leave'), 3);
  limiter.replaceKeys(
    new Map([
      ['stay', requests(0, 3)],
      ['new', requests(0, 2)],
    ]),
  );
  t.is(limiter.size, 2);
  t.is(drain(limiter, 'stay'), 0); // kept its empty bucket
  t.is(drain(limiter, 'new'), 2); // added: full
  t.is(drain(limiter, 'leave'), 0); // removed: best effort denies
  t.is(limiter.quota('leave'), undefined);
  // Re-added, it starts full again: no key ever gets tokens from before.
  limiter.replaceKeys([['leave', requests(0, 1)]]);
  t.is(drain(limiter, 'leave'), 1);
  t.is(drain(limiter, 'stay'), 0);
});

test(title('a stayer whose quota changes is capped to it'), (t) => {
  const { limiter } = setup(DENY_ALL, [['k', requests(0, 10)]]);
  limiter.check('k');
  limiter.replaceKeys([['k', requests(0, 4)]]);
  t.is(drain(limiter, 'k'), 4);
});

test(title('keys on one quota keep buckets and quota changes of their own'), (t) => {
  // The fallback shares one converted quota among the keys that have it: a change to one key's
  // quota, or a stayer's in a new table, must not reach the others.
  const plan = requests(1, 3);
  const { clock, limiter } = setup(DENY_ALL, [
    ['a', plan],
    ['b', requests(1, 3)],
    ['c', plan],
  ]);
  t.is(drain(limiter, 'a'), 3);
  t.is(limiter.check('b').allowed, true);
  limiter.setQuota('a', requests(0, 1));
  t.deepEqual(limiter.quota('b'), { requests: { amount: 1, periodMs: 1000, burst: 3 } });
  t.deepEqual(limiter.quota('c'), { requests: { amount: 1, periodMs: 1000, burst: 3 } });
  clock.advance(1000);
  t.is(drain(limiter, 'a'), 0); // rate 0 since the change: no refill
  t.is(drain(limiter, 'b'), 3); // 2 left, 1 refilled
  t.is(drain(limiter, 'c'), 3);
  limiter.replaceKeys([
    ['b', requests(1, 3)],
    ['c', requests(0, 2)],
    ['d', requests(1, 3)],
  ]);
  t.deepEqual(limiter.quota('b'), { requests: { amount: 1, periodMs: 1000, burst: 3 } });
  t.deepEqual(limiter.quota('c'), { requests: { amount: 0, periodMs: 1000, burst: 2 } });
  t.is(drain(limiter, 'd'), 3);
  clock.advance(2000);
  t.is(drain(limiter, 'b'), 2);
  t.is(drain(limiter, 'c'), 0);
});

test(title('1 and 1n are one key; a string and its bytes are two'), (t) => {
  const { limiter } = setup(DENY_ALL, [
    [1, requests(0, 2)],
    ['ab', requests(0, 1)],
    [new Uint8Array([0x61, 0x62]), requests(0, 1)],
  ]);
  t.true(limiter.check(1n).allowed);
  t.true(limiter.check(1).allowed);
  t.false(limiter.check(1n).allowed);
  t.true(limiter.check('ab').allowed);
  t.true(limiter.check(Buffer.from('ab')).allowed);
  t.deepEqual(limiter.quota(1n), { requests: { amount: 0, periodMs: 1000, burst: 2 } });
});

// The native table keeps a key of up to 24 stored bytes (a tag byte, then the UTF-8 or the bytes:
// docs/format.md §6.1) inline in its entry and longer ones on the heap: keys either side of that
// line, and keys alike but for their last byte or their length, must each be their own key, and
// keep their own tokens when a table replacement moves the buckets.
test(title('keys either side of the inline length of a table entry are each their own key'), (t) => {
  const keys: (string | Uint8Array)[] = [
    'x'.repeat(22),
    'x'.repeat(23),
    'x'.repeat(24),
    'x'.repeat(22) + 'y',
    'x'.repeat(23) + 'y',
    'é'.repeat(11) + 'x',
    'é'.repeat(12),
    new Uint8Array(23).fill(0x78),
    new Uint8Array(24).fill(0x78),
    new Uint8Array(25).fill(0x78),
  ];
  const table = keys.map((k, i): [string | Uint8Array, Quota] => [k, requests(0, i + 1)]);
  const { limiter } = setup(DENY_ALL, table);
  keys.forEach((k, i) => t.true(limiter.check(k).allowed, `key ${i}`));
  limiter.replaceKeys([...table, ['another', requests(0, 1)]]);
  keys.forEach((k, i) => {
    t.deepEqual(limiter.quota(k), { requests: { amount: 0, periodMs: 1000, burst: i + 1 } });
    t.is(drain(limiter, k), i, `key ${i} kept its own tokens`);
  });
  t.is(drain(limiter, 'x'.repeat(25)), 0, 'a key not in the table is best effort');
});

test(title('a duplicate key rejects the whole table and changes nothing'), (t) => {
  const { limiter } = setup(DENY_ALL, [['k', requests(0, 5)]]);
  const shape = {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_DUPLICATE_KEY',
    message: 'The key table names the same key more than once (1 and 1n are the same key)',
  };
  throwsShape(
    t,
    () =>
      limiter.replaceKeys([
        [1, requests(0, 1)],
        [1n, requests(0, 1)],
      ]),
    shape,
  );
  throwsShape(
    t,
    () =>
      new Limiter({
        bestEffort: DENY_ALL,
        keys: [
          ['x', DENY_ALL],
          ['x', DENY_ALL],
        ],
      }),
    shape,
  );
  t.is(limiter.size, 1);
  t.deepEqual(limiter.quota('k'), { requests: { amount: 0, periodMs: 1000, burst: 5 } });
  t.is(drain(limiter, 1), 0);
});

test(title('a clock reading that goes back counts as no time passing'), (t) => {
  let now = 5000;
  const limiter = new Limiter({ bestEffort: requests(1, 1), clock: { now: () => now } });
  now = 6000;
  t.true(limiter.check('x').allowed);
  now = 5500; // refills nothing, and the wait is from the tokens held
  t.deepEqual(limiter.check('x'), refused(1000));
  now = 4000; // before the origin
  t.deepEqual(limiter.check('x'), refused(1000));
  now = 7000;
  t.true(limiter.check('x').allowed);
});

const typeError = (message: string) => ({ instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message });
const rangeError = (message: string) => ({ instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message });

test(title('rejects bad options with class, code and message'), (t) => {
  const make = (options: unknown) => () => new Limiter(options as never);
  throwsShape(t, make(undefined), typeError('The "options" argument must be of type object. Received undefined'));
  throwsShape(t, make({}), typeError('The "bestEffort" option must be of type object. Received undefined'));
  throwsShape(
    t,
    make({ bestEffort: { requests: 5 } }),
    typeError('The "bestEffort.requests" option must be of type object. Received 5'),
  );
  throwsShape(
    t,
    make({ bestEffort: { requests: { burst: 1 } } }),
    typeError(
      'The "bestEffort.requests" option must be an object with either perSecond, or amount and periodMs. Received an instance of Object',
    ),
  );
  // A quota one level too deep: no word of the SyncedLimiter's one dimension (limitSpec is shared).
  throwsShape(
    t,
    make({ bestEffort: { requests: { requests: { perSecond: 1, burst: 1 } } } }),
    typeError(
      'The "bestEffort.requests" option must be an object with either perSecond, or amount and periodMs. Received an instance of Object',
    ),
  );
  throwsShape(
    t,
    make({ bestEffort: { units: { perSecond: 1, amount: 1, periodMs: 1, burst: 1 } } }),
    typeError(
      'The "bestEffort.units" option must be an object with either perSecond, or amount and periodMs. Received an instance of Object',
    ),
  );
  for (const [value, shown] of [
    [-1, '-1'],
    [1.5, '1.5'],
    [NaN, 'NaN'],
    [Infinity, 'Infinity'],
    [2 ** 53, '9007199254740992'],
  ] as const) {
    throwsShape(
      t,
      make({ bestEffort: requests(value, 1) }),
      rangeError(`The "bestEffort.requests.perSecond" option must be a safe integer >= 0. Received ${shown}`),
    );
    throwsShape(
      t,
      make({ bestEffort: DENY_ALL, overall: units(1, value) }),
      rangeError(`The "overall.units.burst" option must be a safe integer >= 0. Received ${shown}`),
    );
  }
  throwsShape(
    t,
    make({ bestEffort: { requests: { perSecond: '5', burst: 1 } } }),
    typeError('The "bestEffort.requests.perSecond" option must be of type number. Received type string ("5")'),
  );
  throwsShape(
    t,
    make({ bestEffort: { requests: { amount: 1, burst: 1 } } }),
    typeError('The "bestEffort.requests.periodMs" option must be of type number. Received undefined'),
  );
  for (const periodMs of [0, -1, 1e-7, NaN, Infinity, 2 ** 53]) {
    throwsShape(
      t,
      make({ bestEffort: { requests: { amount: 1, periodMs, burst: 1 } } }),
      rangeError(
        `The "bestEffort.requests.periodMs" option must be a number of milliseconds of at least 1 ns and at most 2^53 - 1 ns. Received ${periodMs}`,
      ),
    );
  }
  throwsShape(
    t,
    make({ bestEffort: DENY_ALL, keys: 5 }),
    typeError('The "keys" option must be an iterable of [key, quota] pairs. Received 5'),
  );
  throwsShape(
    t,
    make({ bestEffort: DENY_ALL, keys: [[{}, DENY_ALL]] }),
    typeError(
      'The "key" argument must be of type string, number, bigint or Uint8Array. Received an instance of Object',
    ),
  );
  throwsShape(
    t,
    make({ bestEffort: DENY_ALL, clock: {} }),
    typeError('The "clock" option must be an object with a now() method. Received an instance of Object'),
  );
});

test(title('rejects bad arguments with class, code and message, changing nothing'), (t) => {
  const { limiter } = setup(DENY_ALL, [['k', requests(0, 2)]]);
  for (const [cost, shown] of [
    [-1, '-1'],
    [0.5, '0.5'],
    [NaN, 'NaN'],
    [2 ** 53, '9007199254740992'],
  ] as const) {
    throwsShape(
      t,
      () => limiter.check('k', cost),
      rangeError(`The "cost" argument must be a safe integer >= 0. Received ${shown}`),
    );
  }
  throwsShape(
    t,
    () => limiter.check('k', '1' as never),
    typeError('The "cost" argument must be of type number. Received type string ("1")'),
  );
  throwsShape(
    t,
    () => limiter.check(1.5),
    rangeError('The "key" argument must be a safe integer when it is a number. Received 1.5'),
  );
  throwsShape(
    t,
    () => limiter.check(2n ** 63n),
    rangeError('The "key" argument must be in the i64 range when it is a bigint. Received 9223372036854775808n'),
  );
  throwsShape(t, () => limiter.setQuota('nope', DENY_ALL), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_UNKNOWN_KEY',
    message: 'The key is not in the limiter\'s table. Received type string ("nope")',
  });
  throwsShape(
    t,
    () => limiter.setQuota('k', { requests: { perSecond: 1, burst: -2 } }),
    rangeError('The "quota.requests.burst" argument must be a safe integer >= 0. Received -2'),
  );
  throwsShape(
    t,
    () => limiter.setOverall(null as never),
    typeError('The "quota" argument must be of type object. Received null'),
  );
  throwsShape(
    t,
    () => limiter.setBestEffort({ units: { amount: 1, periodMs: 0, burst: 1 } }),
    rangeError(
      'The "quota.units.periodMs" argument must be a number of milliseconds of at least 1 ns and at most 2^53 - 1 ns. Received 0',
    ),
  );
  throwsShape(
    t,
    () => limiter.replaceKeys('ab' as never),
    typeError('The "table" argument must be an iterable of [key, quota] pairs. Received type string ("ab")'),
  );
  throwsShape(
    t,
    () => limiter.replaceKeys([5] as never),
    typeError('The "table[0]" argument must be a [key, quota] pair. Received 5'),
  );
  // Proxies of built-ins pass the iterator-method check, then their method refuses the receiver
  // with an uncoded TypeError; iterators that are not objects: all coded, as any other wrong type.
  for (const table of [
    new Proxy(new Uint8Array(2), {}),
    new Proxy(new Map([['a', DENY_ALL]]), {}),
    { [Symbol.iterator]: () => 5 },
  ]) {
    throwsShape(t, () => limiter.replaceKeys(table as never), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "table" argument must be an iterable of \[key, quota\] pairs\. Received/,
    });
    throwsShape(t, () => new Limiter({ bestEffort: DENY_ALL, keys: table as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "keys" option must be an iterable of \[key, quota\] pairs\. Received/,
    });
  }
  // The caller's own iterator failing otherwise is the caller's error, passed on as it is.
  const own = new Error('from the iterator');
  t.is(
    t.throws(() =>
      limiter.replaceKeys({
        [Symbol.iterator]: () => {
          throw own;
        },
      } as never),
    ),
    own,
  );
  throwsShape(
    t,
    () => limiter.replaceKeys([['x']] as never),
    typeError('The "table[0][1]" argument must be of type object. Received undefined'),
  );
  throwsShape(
    t,
    () =>
      limiter.replaceKeys([
        ['y', DENY_ALL],
        ['x', requests(1, 0.5)],
      ]),
    rangeError('The "table[1][1].requests.burst" argument must be a safe integer >= 0. Received 0.5'),
  );
  t.is(limiter.size, 1);
  t.is(drain(limiter, 'k'), 2);
  t.deepEqual(limiter.bestEffort, { requests: { amount: 0, periodMs: 1000, burst: 0 } });
  t.is(limiter.overall, undefined);
});

test(title('byte keys past what the fallback can key a table by are refused on both backends'), (t) => {
  // As for HeavyHitters: the fallback's bucket map is keyed by a string of one char per byte.
  const quota = { requests: { perSecond: 1, burst: 1 } };
  const limiter = new Limiter({ bestEffort: quota });
  const huge = new Uint8Array(2 ** 29 - 24);
  const refused = {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "key" argument must be at most 536870887 bytes long when it is a Uint8Array. Received 536870888',
  };
  throwsShape(t, () => limiter.check(huge), refused);
  throwsShape(t, () => limiter.replaceKeys([[huge, quota]]), refused);
  throwsShape(t, () => limiter.setQuota(huge, quota), refused);
  throwsShape(t, () => limiter.quota(huge), refused);
  t.is(limiter.size, 0);
});

test(title('a long byte key from a Uint8Array subclass is the key of its bytes, on both backends'), (t) => {
  // The fallback reads long keys in chunks; `subarray` would build them with the subclass's own
  // constructor, which may take other arguments (here: a length only) or throw.
  class Sized extends Uint8Array {
    constructor(length: unknown) {
      super(typeof length === 'number' ? length : 16);
    }
  }
  const quota = { requests: { perSecond: 1, burst: 1 } };
  const key = new Sized(8193).fill(65);
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 100, burst: 100 } }, keys: [[key, quota]] });
  const same = new Uint8Array(8193).fill(65);
  t.deepEqual(limiter.quota(same)?.requests, limiter.quota(key)?.requests);
  t.not(limiter.quota(same), undefined);
  t.deepEqual([limiter.check(same).allowed, limiter.check(key).allowed], [true, false]);
});
