/**
 * rateLimit, tokenBucket and upstreamLimit list their top talkers, on real HTTP servers (plain
 * node:http and Express) with a real client.
 */
import test from 'ava';
import { HeavyHitters, Limiter } from '../lib/index.js';
import { rateLimit, tokenBucket, upstreamLimit } from '../lib/http/index.js';
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
