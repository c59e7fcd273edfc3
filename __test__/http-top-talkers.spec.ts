/**
 * rateLimit, tokenBucket and upstreamLimit list their top talkers, on real HTTP servers (plain
 * node:http and Express) with a real client.
 */
import test from 'ava';
import { HeavyHitters, Limiter, ManualClock } from '../lib/index.js';
import { rateLimitHook, tokenBucketHook, upstreamLimitHook } from '../lib/http/fastify.js';
import { KeepcountStore, rateLimit, tokenBucket, upstreamLimit, WindowQuota } from '../lib/http/index.js';
import { title } from './helpers.js';
import { close, get, listen } from './http-client.js';
import { frameworks, ok } from './http-frameworks.js';

for (const [name, serve] of Object.entries(frameworks)) {
  test(title(`${name}: rateLimit, tokenBucket and upstreamLimit list their top talkers`), async (t) => {
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 1000, burst: 1000 } } });
    const talkers = new HeavyHitters({ intervalMs: 60_000, threshold: 1 });
    const upstreams = new HeavyHitters({ intervalMs: 60_000, threshold: 1 });
    // Threshold 1: every client is listed (by default only those past a quarter of the limit are).
    const limit = rateLimit({
      limit: 100,
      windowMs: 60_000,
      heavyHitters: { threshold: 1 },
      key: (req) => String(req.headers['x-client']),
    });
    const bucket = tokenBucket({ limiter, talkers, key: (req) => String(req.headers['x-client']) });
    const inflight = upstreamLimit({ max: 10, talkers: upstreams, upstream: (req) => req.url ?? '/' });
    const bare = tokenBucket({ limiter });
    const server = serve([limit, bucket, inflight, bare], ok);
    const port = await listen(server);
    t.teardown(() => close(server));
    for (let i = 0; i < 5; i++) await get(port, '/search', { 'x-client': 'heavy' });
    await get(port, '/login', { 'x-client': 'light' });
    t.deepEqual(limit.topTalkers(2), [
      { key: 'heavy', lower: 5, upper: 5 },
      { key: 'light', lower: 1, upper: 1 },
    ]);
    t.deepEqual(bucket.topTalkers(1), [{ key: 'heavy', lower: 5, upper: 5 }]);
    t.deepEqual(inflight.topTalkers(1, 'both'), [{ key: '/search', lower: 5, upper: 5 }]);
    t.deepEqual(bare.topTalkers(3), [], 'a token bucket without talkers keeps no counts to list');
    t.throws(() => tokenBucket({ limiter, talkers: {} as never }), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /The "talkers" option must be a HeavyHitters/,
    });
  });
}

test(title('every topTalkers refuses a bad n or window as HeavyHitters.top does, also where it lists nobody'), (t) => {
  const limiter = () => new Limiter({ bestEffort: { requests: { perSecond: 1, burst: 1 } } });
  const talkers = () => new HeavyHitters({ intervalMs: 60_000, threshold: 1, clock: new ManualClock() });
  const plain = { limit: 10, windowMs: 1000, heavyHitters: false } as const;
  // A quota of the caller's own, without the optional topTalkers.
  const bare = {
    consume: (key: string) => ({
      allowed: true,
      policy: 'bare',
      limit: 1,
      count: 1,
      remaining: 0,
      resetMs: 1,
      windowMs: 1,
      key,
    }),
  };
  const sources: [string, (n: never, window?: never) => unknown][] = [
    ['HeavyHitters.top', (n, w) => talkers().top(n, w)],
    ['rateLimit()', (n, w) => rateLimit({ limit: 10, windowMs: 1000 }).topTalkers(n, w)],
    ['rateLimit({ heavyHitters: false })', (n, w) => rateLimit(plain).topTalkers(n, w)],
    ['rateLimit({ quota }) without topTalkers', (n, w) => rateLimit({ quota: bare }).topTalkers(n, w)],
    ['WindowQuota({ heavyHitters: false })', (n, w) => new WindowQuota(plain).topTalkers(n, w)],
    ['tokenBucket({ talkers })', (n, w) => tokenBucket({ limiter: limiter(), talkers: talkers() }).topTalkers(n, w)],
    ['tokenBucket without talkers', (n, w) => tokenBucket({ limiter: limiter() }).topTalkers(n, w)],
    ['upstreamLimit without talkers', (n, w) => upstreamLimit({ max: 1 }).topTalkers(n, w)],
    ['KeepcountStore before init()', (n, w) => new KeepcountStore().topTalkers(n, w)],
    ['rateLimitHook({ heavyHitters: false })', (n, w) => rateLimitHook(plain).topTalkers(n, w)],
    ['tokenBucketHook without talkers', (n, w) => tokenBucketHook({ limiter: limiter() }).topTalkers(n, w)],
    ['upstreamLimitHook without talkers', (n, w) => upstreamLimitHook({ max: 1 }).topTalkers(n, w)],
  ];
  const nType = { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message: /^The "n" argument must be of type/ };
  const nRange = {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /^The "n" argument must be an integer in \[0, 16777216\]/,
  };
  const windowType = {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "window" argument must be one of 'current', 'previous', 'both'/,
  };
  const bad: [unknown, unknown, typeof nType][] = [
    [-1, 'current', nRange],
    [NaN, undefined, nRange],
    [1.5, 'both', nRange],
    [2 ** 24 + 1, 'previous', nRange],
    ['10', 'current', nType],
    [undefined, undefined, nType],
    [1, 'bogus', windowType],
    [1, null, windowType],
  ];
  for (const [n, window, shape] of bad) {
    // The exact message is the one HeavyHitters.top gives for the same arguments.
    const { message } = t.throws(() => talkers().top(n as never, window as never), shape)!;
    for (const [name, topTalkers] of sources) {
      t.throws(() => topTalkers(n as never, window as never), { ...shape, message }, `${name}: ${message}`);
    }
  }
  for (const [name, topTalkers] of sources) {
    t.deepEqual(topTalkers(0 as never, 'both' as never), [], `${name} lists nobody yet`);
  }
});
