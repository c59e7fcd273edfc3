// Public functions that took bad arguments silently, or threw without a `code`: each now throws
// TypeError ERR_INVALID_ARG_TYPE or RangeError ERR_OUT_OF_RANGE, and still answers valid input.
import type { IncomingMessage } from 'node:http';
import test from 'ava';
import {
  clientIp,
  ipKey,
  rateLimit,
  rateLimitHeaders,
  WindowQuota,
  type RateLimitDecision,
} from '../lib/http/index.js';
import {
  Estimator,
  HeavyHitters,
  Inflight,
  Limiter,
  ManualClock,
  proportionalRate,
  Rate,
  type RateComponents,
} from '../lib/index.js';
import { throwsShape, title } from './helpers.js';

const typeError = (message: string) => ({ instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message });
const rangeError = (message: string) => ({ instanceOf: RangeError, code: 'ERR_OUT_OF_RANGE', message });

const components = (over: Record<string, unknown>): RateComponents =>
  ({ prevSamples: 10, currSamples: 4, intervalMs: 2000, currentIntervalFraction: 0.25, ...over }) as RateComponents;

test(title('proportionalRate still computes from valid components'), (t) => {
  t.is(proportionalRate(components({})), 5.75);
  t.is(proportionalRate(components({ currentIntervalFraction: 1 })), 2, "SyncedRate's fraction at a window's end");
  t.is(proportionalRate(components({ currentIntervalFraction: 0 })), 7);
  t.is(proportionalRate(components({ prevSamples: -4, currSamples: -2 })), -2.5, 'negative counts, as observe takes');
  t.is(proportionalRate(components({ prevSamples: 2 ** 60, currSamples: 0 })), 2 ** 60 * 0.375, 'counts past 2^53');
  t.is(proportionalRate(components({ intervalMs: 2 ** 52, prevSamples: 0, currSamples: 0 })), 0);
  const clock = new ManualClock();
  const rate = new Rate({ intervalMs: 1000, clock, seed: 1n });
  rate.observe('k', 8);
  clock.advance(1000);
  rate.observe('k', 2); // starts the next interval
  clock.advance(250);
  t.is(rate.rateWith('k', proportionalRate), 8 * 0.75 + 2, 'what rateWith passes is accepted');
});

test(title('proportionalRate refuses a field that is not a number with ERR_INVALID_ARG_TYPE'), (t) => {
  // The probe's object: every field of the wrong type; the first is named.
  throwsShape(
    t,
    () =>
      proportionalRate(
        components({ prevSamples: '4', currSamples: null, intervalMs: [10], currentIntervalFraction: '0.5' }),
      ),
    typeError('The "components.prevSamples" argument must be of type number. Received type string ("4")'),
  );
  throwsShape(
    t,
    () => proportionalRate(components({ prevSamples: 1n })),
    typeError('The "components.prevSamples" argument must be of type number. Received 1n'),
  );
  throwsShape(
    t,
    () => proportionalRate(components({ currSamples: null })),
    typeError('The "components.currSamples" argument must be of type number. Received null'),
  );
  throwsShape(
    t,
    () => proportionalRate(components({ intervalMs: [10] })),
    typeError('The "components.intervalMs" argument must be of type number. Received an instance of Array'),
  );
  throwsShape(
    t,
    () => proportionalRate(components({ currentIntervalFraction: '0.5' })),
    typeError('The "components.currentIntervalFraction" argument must be of type number. Received type string ("0.5")'),
  );
  throwsShape(
    t,
    () => proportionalRate(components({ currentIntervalFraction: undefined })),
    typeError('The "components.currentIntervalFraction" argument must be of type number. Received undefined'),
  );
  for (const [value, received] of [
    [undefined, 'undefined'],
    [null, 'null'],
    [5, '5'],
  ] as const) {
    throwsShape(
      t,
      () => proportionalRate(value as never),
      typeError(`The "components" argument must be of type object. Received ${received}`),
    );
  }
});

test(title('proportionalRate refuses a number out of its range with ERR_OUT_OF_RANGE'), (t) => {
  for (const value of [0, -1000, 1.5, 2 ** 52 + 2, NaN, Infinity]) {
    throwsShape(
      t,
      () => proportionalRate(components({ intervalMs: value })),
      rangeError(`The "components.intervalMs" argument must be an integer in [1, 4503599627370496]. Received ${value}`),
    );
  }
  for (const value of [1.5, NaN, -Infinity]) {
    throwsShape(
      t,
      () => proportionalRate(components({ prevSamples: value })),
      rangeError(`The "components.prevSamples" argument must be an integer. Received ${value}`),
    );
    throwsShape(
      t,
      () => proportionalRate(components({ currSamples: value })),
      rangeError(`The "components.currSamples" argument must be an integer. Received ${value}`),
    );
  }
  for (const value of [-0.25, 1.5, NaN]) {
    throwsShape(
      t,
      () => proportionalRate(components({ currentIntervalFraction: value })),
      rangeError(`The "components.currentIntervalFraction" argument must be a number in [0, 1]. Received ${value}`),
    );
  }
});

const request = {
  headers: { 'x-forwarded-for': '1.2.3.4' },
  socket: { remoteAddress: '10.0.0.1' },
} as unknown as IncomingMessage;

test(title('clientIp validates trustProxy as the rateLimit option, as an argument'), (t) => {
  t.is(clientIp(request), '10.0.0.1');
  t.is(clientIp(request, undefined), '10.0.0.1');
  t.is(clientIp(request, false), '10.0.0.1');
  t.is(clientIp(request, 0), '10.0.0.1');
  t.is(clientIp(request, 1), '1.2.3.4');
  t.is(clientIp(request, 2), '1.2.3.4');
  t.is(
    clientIp(request, (ip) => ip === '10.0.0.1'),
    '1.2.3.4',
  );
  for (const value of [-1, 1.5, NaN, Infinity, 2 ** 53]) {
    throwsShape(
      t,
      () => clientIp(request, value),
      rangeError(`The "trustProxy" argument must be an integer >= 0 when it is a number. Received ${value}`),
    );
  }
  for (const [value, received] of [
    ['1', 'type string ("1")'],
    [true, 'type boolean (true)'],
    [null, 'null'],
    [{}, 'an instance of Object'],
    [1n, '1n'],
  ] as const) {
    throwsShape(
      t,
      () => clientIp(request, value as never),
      typeError(`The "trustProxy" argument must be false, a number or a function. Received ${received}`),
    );
  }
  // The option is refused the same way, named as an option.
  throwsShape(
    t,
    () => rateLimit({ limit: 1, windowMs: 1000, trustProxy: -1 }),
    rangeError('The "trustProxy" option must be an integer >= 0 when it is a number. Received -1'),
  );
});

test(title('clientIp refuses a request that is not an object, and reads one without headers'), (t) => {
  for (const [value, received] of [
    [null, 'null'],
    [undefined, 'undefined'],
    ['10.0.0.1', 'type string ("10.0.0.1")'],
  ] as const) {
    for (const trustProxy of [false, 1] as const) {
      throwsShape(
        t,
        () => clientIp(value as never, trustProxy),
        typeError(`The "req" argument must be a request. Received ${received}`),
      );
    }
  }
  // A request-like object without headers or socket: no address, no crash.
  t.is(clientIp({} as never, 1), 'unknown');
  t.is(clientIp({ socket: { remoteAddress: '10.0.0.9' } } as never, 2), '10.0.0.9');
});

test(title('ipKey refuses an address that is not a string, and a bad ipv6Subnet'), (t) => {
  t.is(ipKey('203.0.113.7'), '203.0.113.7');
  t.is(ipKey('2001:db8:1:2::1', undefined), '2001:db8:1::/56');
  t.is(ipKey('2001:db8:1:2::1', false), '2001:db8:1:2::1');
  for (const [value, received] of [
    [5, '5'],
    [undefined, 'undefined'],
    [null, 'null'],
    [['::1'], 'an instance of Array'],
  ] as const) {
    throwsShape(
      t,
      () => ipKey(value as never),
      typeError(`The "ip" argument must be of type string. Received ${received}`),
    );
  }
  // No argument at all, as JavaScript callers can.
  throwsShape(
    t,
    () => (ipKey as (...args: unknown[]) => string)(),
    typeError('The "ip" argument must be of type string. Received undefined'),
  );
  // ipv6Subnet is refused with the message of the option it shares with rateLimit.
  for (const value of [31, 65, 56.5]) {
    throwsShape(
      t,
      () => ipKey('::1', value),
      rangeError(`The "ipv6Subnet" option must be false or an integer in [32, 64]. Received ${value}`),
    );
  }
  for (const [value, received] of [
    ['56', 'type string ("56")'],
    [null, 'null'],
    [true, 'type boolean (true)'],
  ] as const) {
    throwsShape(
      t,
      () => ipKey('::1', value as never),
      typeError(`The "ipv6Subnet" option must be false or a number. Received ${received}`),
    );
  }
});

const decision = (over: Record<string, unknown>): RateLimitDecision =>
  ({
    allowed: true,
    policy: 'default',
    limit: 100,
    count: 1,
    remaining: 99,
    resetMs: 1500,
    windowMs: 60_000,
    key: 'k',
    ...over,
  }) as RateLimitDecision;

test(title('rateLimitHeaders still formats valid decisions, a WindowQuota one too'), (t) => {
  t.deepEqual(rateLimitHeaders(decision({})), {
    'RateLimit-Policy': '"default";q=100;w=60',
    RateLimit: '"default";r=99;t=2',
  });
  t.deepEqual(rateLimitHeaders(decision({ allowed: false, remaining: 0, resetMs: 0, limit: 0, windowMs: 0 })), {
    'RateLimit-Policy': '"default";q=0;w=0',
    RateLimit: '"default";r=0;t=0',
    'Retry-After': '1',
  });
  t.deepEqual(rateLimitHeaders(decision({ limit: 2 ** 60, remaining: 2 ** 60, windowMs: 2 ** 52 })), {
    'RateLimit-Policy': '"default";q=999999999999999;w=4503599627371',
    RateLimit: '"default";r=999999999999999;t=2',
  });
  const quota = new WindowQuota({ limit: 2, windowMs: 1000, policy: 'api', clock: new ManualClock() });
  t.deepEqual(rateLimitHeaders(quota.consume('a')), {
    'RateLimit-Policy': '"api";q=2;w=1',
    RateLimit: '"api";r=1;t=1',
  });
});

test(title('rateLimitHeaders refuses a decision without the fields it reads'), (t) => {
  throwsShape(
    t,
    () => rateLimitHeaders({} as RateLimitDecision),
    typeError('The "decision.allowed" argument must be of type boolean. Received undefined'),
  );
  for (const [value, received] of [
    [undefined, 'undefined'],
    [null, 'null'],
    ['decision', 'type string ("decision")'],
  ] as const) {
    throwsShape(
      t,
      () => rateLimitHeaders(value as never),
      typeError(`The "decision" argument must be of type object. Received ${received}`),
    );
  }
  throwsShape(
    t,
    () => rateLimitHeaders(decision({ allowed: 1 })),
    typeError('The "decision.allowed" argument must be of type boolean. Received 1'),
  );
  throwsShape(
    t,
    () => rateLimitHeaders(decision({ policy: undefined })),
    typeError('The "decision.policy" argument must be a string of printable ASCII. Received undefined'),
  );
  // 'default' is the policy the header fields remember now; a new one is checked for its text.
  rateLimitHeaders(decision({}));
  throwsShape(
    t,
    () => rateLimitHeaders(decision({ policy: 'naïve' })),
    typeError('The "decision.policy" argument must be a string of printable ASCII. Received type string ("naïve")'),
  );
  for (const name of ['limit', 'remaining', 'resetMs', 'windowMs']) {
    throwsShape(
      t,
      () => rateLimitHeaders(decision({ [name]: '5' })),
      typeError(`The "decision.${name}" argument must be of type number. Received type string ("5")`),
    );
    throwsShape(
      t,
      () => rateLimitHeaders(decision({ [name]: 5n })),
      typeError(`The "decision.${name}" argument must be of type number. Received 5n`),
    );
  }
  for (const name of ['limit', 'remaining']) {
    for (const value of [-1, 1.5, NaN, Infinity]) {
      throwsShape(
        t,
        () => rateLimitHeaders(decision({ [name]: value })),
        rangeError(`The "decision.${name}" argument must be an integer >= 0. Received ${value}`),
      );
    }
  }
  for (const name of ['resetMs', 'windowMs']) {
    for (const value of [-1, NaN, Infinity, 2 ** 52 + 1]) {
      throwsShape(
        t,
        () => rateLimitHeaders(decision({ [name]: value })),
        rangeError(
          `The "decision.${name}" argument must be a number of milliseconds in [0, 4503599627370496]. Received ${value}`,
        ),
      );
    }
  }
});

test(title('Estimator#merge brand-checks its argument'), (t) => {
  const a = new Estimator({ hashes: 2, slots: 64, seed: 1n });
  const b = new Estimator({ hashes: 2, slots: 64, seed: 1n });
  b.incr('k', 3);
  a.merge(b);
  t.is(a.get('k'), 3, 'a real Estimator still merges');
  throwsShape(
    t,
    () => a.merge(Object.create(Estimator.prototype) as Estimator),
    typeError('The "other" argument must be an instance of Estimator. Received an instance of Estimator'),
  );
  for (const [value, received] of [
    [null, 'null'],
    [undefined, 'undefined'],
    [5, '5'],
    [new Rate({ intervalMs: 1000 }), 'an instance of Rate'],
  ] as const) {
    throwsShape(
      t,
      () => a.merge(value as never),
      typeError(`The "other" argument must be an instance of Estimator. Received ${received}`),
    );
  }
  t.is(a.get('k'), 3, 'a refused merge changes nothing');
  b.close();
  throwsShape(t, () => a.merge(b), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: 'This Estimator was closed; its counters are gone',
  });
});

test(title('HeavyHitters#merge brand-checks a HeavyHitters source'), (t) => {
  const options = {
    intervalMs: 1000,
    threshold: 2,
    capacity: 16,
    hashes: 2,
    slots: 64,
    seed: 5,
    clock: new ManualClock(),
  };
  const heavy = new HeavyHitters(options);
  const other = new HeavyHitters(options);
  other.incr('k', 4);
  heavy.merge(other);
  t.is(heavy.count('k').upper, 4, 'a real HeavyHitters still merges');
  heavy.merge(other.serialize());
  t.is(heavy.count('k').upper, 8, 'serialized bytes still merge');
  throwsShape(
    t,
    () => heavy.merge(Object.create(HeavyHitters.prototype) as HeavyHitters),
    typeError(
      'The "source" argument must be an instance of HeavyHitters or Uint8Array. Received an instance of HeavyHitters',
    ),
  );
  for (const [value, received] of [
    [null, 'null'],
    [undefined, 'undefined'],
    ['bytes', 'type string ("bytes")'],
    [new Estimator(), 'an instance of Estimator'],
  ] as const) {
    throwsShape(
      t,
      () => heavy.merge(value as never),
      typeError(`The "source" argument must be an instance of HeavyHitters or Uint8Array. Received ${received}`),
    );
  }
  t.is(heavy.count('k').upper, 8, 'a refused merge changes nothing');
  other.close();
  throwsShape(t, () => heavy.merge(other), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: 'This HeavyHitters was closed; its counters are gone',
  });
});

test(title("a Proxy of a Uint8Array is no key; a Uint8Array key's own getters are never run"), (t) => {
  // The Proxy passed `instanceof` and then failed in the typed array's own methods, an uncoded
  // TypeError; the check read `Symbol.toStringTag`, running the caller's getter mid-validation,
  // where it could close the object the call then went to.
  const proxy = new Proxy(new Uint8Array([1, 2]), {});
  const badKey = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE' };
  const estimator = new Estimator();
  const rate = new Rate({ intervalMs: 1000 });
  const inflight = new Inflight();
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 10, burst: 10 } } });
  const heavy = new HeavyHitters({ intervalMs: 1000, threshold: 1 });
  const calls = [
    (key: never) => estimator.incr(key),
    (key: never) => estimator.get(key),
    (key: never) => estimator.counterIndexes(key),
    (key: never) => rate.observe(key),
    (key: never) => inflight.enter(key),
    (key: never) => inflight.incr(key),
    (key: never) => limiter.check(key),
    (key: never) => heavy.incr(key),
  ];
  for (const call of calls) t.throws(() => call(proxy as never), badKey);
  let getterRuns = 0;
  const tagged = new Uint8Array([1, 2]);
  Object.defineProperty(tagged, Symbol.toStringTag, {
    get() {
      getterRuns++;
      estimator.close();
      return 'Uint8Array';
    },
  });
  for (const call of calls) t.notThrows(() => call(tagged as never));
  t.is(getterRuns, 0);
  t.is(estimator.get(new Uint8Array([1, 2])), 1, 'counted as its bytes, by an open sketch');
});
