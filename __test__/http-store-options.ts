/**
 * Bad sketch options of both stores (`KeepcountStore`, `keepcountFastifyStore`), each with the
 * error class, code and message it must throw where it is given: at the store's construction.
 */
export const badStoreOptions: [
  options: object,
  instanceOf: typeof TypeError | typeof RangeError,
  code: string,
  message: RegExp,
][] = [
  [{ clients: -1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "clients" option must be an integer in \[1, 1000000\]/],
  [{ clients: '10' }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "clients" option must be of type number/],
  [{ clients: 1_000_000, hashes: 1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "clients" option must be small enough/],
  [{ hashes: 'x' }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "hashes" option must be of type number/],
  [{ hashes: 0 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "hashes" option must be an integer in \[1, 32\]/],
  [{ slots: 0 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "slots" option must be an integer/],
  [{ slots: -5 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "slots" option must be an integer/],
  [{ hashes: 4, slots: 2 ** 26 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "slots" option must be at most 33554432/],
  [{ seed: {} }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "seed" option must be of type bigint or number/],
  [{ seed: -1 }, RangeError, 'ERR_OUT_OF_RANGE', /^The "seed" option must be a safe integer >= 0/],
  [{ clock: 3 }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "clock" option must be an object with a now\(\) method/],
  [{ clock: null }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "clock" option must be an object with a now\(\) method/],
  [
    { clock: { now: () => Number.NaN } },
    RangeError,
    'ERR_OUT_OF_RANGE',
    /^The clock's now\(\) must be a finite number of milliseconds. Received NaN/,
  ],
  [
    { clock: { now: () => '5' } },
    RangeError,
    'ERR_OUT_OF_RANGE',
    /^The clock's now\(\) must be a finite number of milliseconds/,
  ],
  [{ heavyHitters: 5 }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "heavyHitters" option must be a boolean or an object/],
  [{ heavyHitters: null }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "heavyHitters" option must be a boolean/],
  [{ heavyHitters: { threshold: 0 } }, RangeError, 'ERR_OUT_OF_RANGE', /^The "threshold" option must be an integer/],
  [{ heavyHitters: { capacity: -1 } }, RangeError, 'ERR_OUT_OF_RANGE', /^The "capacity" option must be an integer/],
  [{ rate: 'shared' }, TypeError, 'ERR_INVALID_ARG_TYPE', /^The "rate" option must be a Rate/],
];
