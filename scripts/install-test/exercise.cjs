'use strict';
/* global require, module, process, Buffer */
/* eslint-disable @typescript-eslint/no-require-imports -- a CommonJS module on purpose */
// The smoke test each consumer runs once it has loaded keepcount and keepcount/http its own way
// (require or import, JavaScript or TypeScript). Asserts the backend is the one run.sh expects
// (EXPECT_BACKEND) and returns a digest of the serialized sketch, which run.sh compares across
// consumers and backends: the fallback is bit-identical to the Rust core.
const assert = require('node:assert/strict');
const { createHash } = require('node:crypto');

module.exports = async function exercise(k, http, flavor) {
  assert.equal(k.backend, process.env.EXPECT_BACKEND, `${flavor}: backend`);

  const estimator = new k.Estimator({ hashes: 4, slots: 256, seed: 7n });
  assert.equal(estimator.incr('a'), 1);
  assert.equal(estimator.incr('a', 4), 5);
  estimator.incr(42n, 2);
  estimator.incr(Buffer.from('bytes'));
  assert.equal(estimator.get('a'), 5);
  assert.equal(estimator.get(42), 2);
  const bytes = estimator.serialize();
  const copy = k.Estimator.deserialize(bytes);
  assert.equal(copy.get('a'), 5);
  assert.throws(() => k.Estimator.deserialize(new Uint8Array(3)), { code: 'ERR_KEEPCOUNT_CORRUPT' });

  const clock = new k.ManualClock();
  const rate = new k.Rate({ intervalMs: 1000, seed: 1, clock });
  assert.equal(rate.observe('x', 3), 3);
  clock.advance(1000);
  assert.equal(rate.rate('x'), 3);

  const inflight = new k.Inflight({ seed: 2 });
  const [guard, count] = inflight.incr('upstream');
  assert.equal(count, 1);
  guard.release();
  assert.equal(inflight.get('upstream'), 0);

  assert.equal(await k.timeout(Promise.resolve('on time'), 1000), 'on time');
  await assert.rejects(k.timeout(new Promise(() => {}), 20), (error) => {
    assert.ok(error instanceof k.TimeoutError);
    assert.equal(error.code, 'ERR_KEEPCOUNT_TIMEOUT');
    return true;
  });
  await k.sleep(1);

  const limiter = new k.Limiter({ bestEffort: { requests: { perSecond: 1, burst: 2 } }, clock });
  assert.deepEqual(limiter.check('k'), { allowed: true });
  assert.deepEqual(limiter.check('k'), { allowed: true });
  assert.deepEqual(limiter.check('k'), { allowed: false, retryAfterMs: 1000 });

  const quota = new http.WindowQuota({ limit: 1, windowMs: 1000, seed: 3, clock });
  assert.equal(quota.consume('192.0.2.1').allowed, true);
  assert.equal(quota.consume('192.0.2.1').allowed, false);
  assert.equal(typeof http.rateLimit, 'function');
  assert.equal(typeof require('keepcount/fastify').keepcountFastify, 'function');
  // keepcount/redis loads without ioredis or redis installed (both are optional peers).
  const redis = require('keepcount/redis');
  const sync = new redis.RedisSync({ sendCommand: async () => [] });
  assert.equal(
    new redis.SyncedWindowQuota({ sync, name: 'q', seed: 1, limit: 1, windowMs: 1000 }).consume('k').allowed,
    true,
  );
  await sync.close();

  return createHash('sha256').update(bytes).digest('hex').slice(0, 16);
};
