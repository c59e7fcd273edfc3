import test from 'ava';
import { createServer } from 'node:http';
import { Registry } from 'prom-client';
import { backend, HeavyHitters, Inflight, Limiter } from '../lib/index.js';
import { rateLimit, tokenBucket, UpstreamLimit, WindowQuota } from '../lib/http/index.js';
import { tokenBucketHook } from '../lib/http/fastify.js';
import { KeepcountMetrics } from '../lib/metrics.js';
import { SyncedInflight, SyncedLimiter, SyncedWindowQuota } from '../lib/redis/index.js';
import { recordingSync } from './recording-sync.js';
import { close, get, listen } from './http-client.js';
import { throwsShape, title } from './helpers.js';
import { scratch } from './shared-workers.js';

/** The value of the sample `name{labels}` in Prometheus text, or undefined. */
function sample(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

test(
  title('a scrape shows decisions, top talkers with exact counts, and tracked clients of a live server'),
  async (t) => {
    const registry = new Registry();
    // X-Client picks the key, so one loopback client can be many.
    const limit = rateLimit({ limit: 3, windowMs: 60_000, key: (req) => String(req.headers['x-client']) });
    const metrics = new KeepcountMetrics({ registry, topTalkers: 2 });
    metrics.addQuota('api', limit);
    const server = createServer((req, res) => limit(req, res, () => res.end('ok')));
    const port = await listen(server);
    try {
      for (let i = 0; i < 10; i++) await get(port, '/', { 'x-client': 'flooder' });
      for (let i = 0; i < 4; i++) await get(port, '/', { 'x-client': 'busy' });
      for (let c = 0; c < 5; c++) await get(port, '/', { 'x-client': `polite-${c}` });
    } finally {
      await close(server);
    }
    const text = await registry.metrics();
    t.is(sample(text, 'keepcount_decisions_total', 'policy="api",outcome="allowed"'), 3 + 3 + 5);
    t.is(sample(text, 'keepcount_decisions_total', 'policy="api",outcome="refused"'), 7 + 1);
    // The threshold is ceil(3 / 4) = 1: every client is counted exactly from its first request.
    t.is(sample(text, 'keepcount_top_talker_requests', 'policy="api",client="flooder",bound="lower"'), 10);
    t.is(sample(text, 'keepcount_top_talker_requests', 'policy="api",client="busy",bound="upper"'), 4);
    t.is(text.match(/^keepcount_top_talker_requests\{/gm)?.length, 4, 'two clients × two bounds, no more');
    t.is(sample(text, 'keepcount_tracked_clients', 'policy="api"'), 7);
    t.is(sample(text, 'keepcount_overflow_requests', 'policy="api"'), 0);
    // A second scrape adds only what happened since.
    const again = await registry.metrics();
    t.is(sample(again, 'keepcount_decisions_total', 'policy="api",outcome="allowed"'), 11);
  },
);

test(title('a tokenBucket middleware exports its decisions and the top talkers of its talkers table'), async (t) => {
  const registry = new Registry();
  const limiter = new Limiter({ bestEffort: { requests: { perSecond: 0, burst: 2 } } });
  const talkers = new HeavyHitters({ intervalMs: 60_000, threshold: 1, capacity: 8, seed: 3n });
  const limit = tokenBucket({ limiter, talkers, key: (req) => String(req.headers['x-client']) });
  new KeepcountMetrics({ registry, topTalkers: 1 }).addLimiter('buckets', limit);
  const server = createServer((req, res) => limit(req, res, () => res.end('ok')));
  const port = await listen(server);
  try {
    // One best-effort bucket of 2 for everyone: the first two requests pass, the rest are refused.
    for (let i = 0; i < 4; i++) await get(port, '/', { 'x-client': 'flooder' });
    await get(port, '/', { 'x-client': 'polite' });
  } finally {
    await close(server);
  }
  const text = await registry.metrics();
  t.is(sample(text, 'keepcount_decisions_total', 'policy="buckets",outcome="allowed"'), 2);
  t.is(sample(text, 'keepcount_decisions_total', 'policy="buckets",outcome="refused"'), 3);
  t.is(sample(text, 'keepcount_top_talker_requests', 'policy="buckets",client="flooder",bound="lower"'), 4);
  t.is(text.match(/^keepcount_top_talker_requests\{/gm)?.length, 2, 'one client × two bounds');
  t.is(sample(text, 'keepcount_tracked_clients', 'policy="buckets"'), 2);
  t.is(sample(text, 'keepcount_overflow_requests', 'policy="buckets"'), 0);
});

test(
  title('local, shared and synced limiters export the decisions of their checks; a bad one is a TypeError'),
  async (t) => {
    const registry = new Registry();
    const metrics = new KeepcountMetrics({ registry });
    const quota = { requests: { perSecond: 0, burst: 1 } };
    const local = new Limiter({ bestEffort: quota });
    // Never synced: a key with no loan yet is refused until one comes in (README, SyncedLimiter).
    const synced = new SyncedLimiter({ sync: recordingSync([]), name: 'm', limit: { perSecond: 10, burst: 10 } });
    const hooked = new Limiter({ bestEffort: quota });
    metrics
      .addLimiter('local', local)
      .addLimiter('synced', tokenBucket({ limiter: synced }))
      .addLimiter('hook', tokenBucketHook({ limiter: hooked }));
    for (let i = 0; i < 3; i++) local.check('k');
    hooked.check('k');
    t.throws(() => local.check('k', -1), { instanceOf: RangeError }, 'a check that throws counts as neither');
    synced.check('k');
    const text = await registry.metrics();
    t.is(sample(text, 'keepcount_decisions_total', 'policy="local",outcome="allowed"'), 1);
    t.is(sample(text, 'keepcount_decisions_total', 'policy="local",outcome="refused"'), 2);
    t.is(sample(text, 'keepcount_decisions_total', 'policy="synced",outcome="allowed"'), 0);
    t.is(sample(text, 'keepcount_decisions_total', 'policy="synced",outcome="refused"'), 1);
    t.is(sample(text, 'keepcount_decisions_total', 'policy="hook",outcome="allowed"'), 1);
    t.is(sample(text, 'keepcount_tracked_clients', 'policy="local"'), undefined, 'no talkers, no gauges');
    if (backend === 'native') {
      const shared = Limiter.openShared('metrics', { quota, seed: 1n, dir: scratch(t) });
      metrics.addLimiter('shared', shared);
      shared.check('k');
      shared.check('k');
      const after = await registry.metrics();
      t.is(sample(after, 'keepcount_decisions_total', 'policy="shared",outcome="allowed"'), 1);
      t.is(sample(after, 'keepcount_decisions_total', 'policy="shared",outcome="refused"'), 1);
      shared.close();
    }
    for (const bad of [{}, tokenBucket({ limiter: { check: () => ({ allowed: true as const }) } }), undefined]) {
      throwsShape(t, () => metrics.addLimiter('x', bad as never), {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /The "limiter" argument must be a Limiter, a shared Limiter, a SyncedLimiter or a tokenBucket/,
      });
    }
  },
);

test(title('upstream limits export their decisions and in-flight counts per listed key'), async (t) => {
  const registry = new Registry();
  const upstream = new UpstreamLimit({ max: 1 });
  new KeepcountMetrics({ registry, prefix: 'app_' }).addUpstream('db', upstream, ['primary', 'replica']);
  const held = upstream.acquire('primary');
  upstream.acquire('primary');
  const text = await registry.metrics();
  t.is(sample(text, 'app_inflight', 'upstream="db",key="primary"'), 1);
  t.is(sample(text, 'app_inflight', 'upstream="db",key="replica"'), 0);
  t.is(sample(text, 'app_decisions_total', 'policy="db",outcome="refused"'), 1);
  held.release();
  t.is(sample(await registry.metrics(), 'app_inflight', 'upstream="db",key="primary"'), 0);
});

test(
  title('a synced quota exports its decisions and the clients it counts exactly, by fleet-wide counts'),
  async (t) => {
    const registry = new Registry();
    // Never synced here: the counts are this node's, the export the same as across machines.
    const sync = recordingSync([]);
    const clock = { now: () => 6_000_000 * 60_000 + 5 };
    const options = { sync, seed: 7, limit: 3, windowMs: 60_000, clock };
    const exact = new SyncedWindowQuota({ ...options, name: 'exact', heavyHitters: true });
    const plain = new SyncedWindowQuota({ ...options, name: 'plain' });
    new KeepcountMetrics({ registry }).addQuota('exact', rateLimit({ quota: exact })).addQuota('plain', plain);
    for (const quota of [exact, plain]) {
      for (let i = 0; i < 5; i++) quota.consume('flooder');
      quota.consume('polite');
    }
    const text = await registry.metrics();
    for (const policy of ['exact', 'plain']) {
      t.is(sample(text, 'keepcount_decisions_total', `policy="${policy}",outcome="allowed"`), 3 + 1);
      t.is(sample(text, 'keepcount_decisions_total', `policy="${policy}",outcome="refused"`), 2);
    }
    t.is(sample(text, 'keepcount_top_talker_requests', 'policy="exact",client="flooder",bound="lower"'), 5);
    t.is(sample(text, 'keepcount_tracked_clients', 'policy="exact"'), 2);
    t.is(sample(text, 'keepcount_overflow_requests', 'policy="exact"'), 0);
    t.is(sample(text, 'keepcount_tracked_clients', 'policy="plain"'), 0, 'no heavy hitters: none tracked');
    t.is(text.match(/^keepcount_top_talker_requests\{policy="plain"/gm), null);
    await sync.close();
  },
);

test(title('the overflow of a full table is visible, and bad arguments are coded errors'), async (t) => {
  const registry = new Registry();
  const quota = new WindowQuota({ limit: 1, windowMs: 60_000, heavyHitters: { capacity: 2 } });
  const metrics = new KeepcountMetrics({ registry }).addQuota('tiny', quota);
  for (let c = 0; c < 5; c++) for (let i = 0; i < 2; i++) quota.consume(`c${c}`);
  const text = await registry.metrics();
  t.is(sample(text, 'keepcount_tracked_clients', 'policy="tiny"'), 2);
  t.true(sample(text, 'keepcount_overflow_requests', 'policy="tiny"')! > 0);
  throwsShape(t, () => metrics.addQuota('tiny', quota), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "policy" argument must be a name not added yet/,
  });
  throwsShape(t, () => metrics.addQuota('x', {} as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /The "quota" argument must be a WindowQuota, a SyncedWindowQuota or a rateLimit middleware/,
  });
  throwsShape(t, () => new KeepcountMetrics({ registry: new Registry(), topTalkers: 101 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "topTalkers" option must be an integer in \[0, 100\]/,
  });
  // prom-client's own refusals are plain Errors with no code: these are ours.
  throwsShape(t, () => new KeepcountMetrics({ registry }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_DUPLICATE_KEY',
    message: /already holds a metric named "keepcount_decisions_total"/,
  });
  t.notThrows(() => new KeepcountMetrics({ registry, prefix: 'second_' }));
  t.notThrows(() => new KeepcountMetrics({ registry: new Registry(), prefix: '' }));
  for (const prefix of ['1x_', 'a-b_', 'a b', 'ü_']) {
    throwsShape(t, () => new KeepcountMetrics({ registry: new Registry(), prefix }), {
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: /The "prefix" option must be a Prometheus metric name prefix/,
    });
  }
  throwsShape(t, () => new KeepcountMetrics({ registry: {} as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /The "registry" option must be a prom-client Registry/,
  });
});

test(
  title('a quota or in-flight counter closed while exported leaves its gauges out, and the scrape works'),
  async (t) => {
    const registry = new Registry();
    const quota = new WindowQuota({ limit: 5, windowMs: 60_000 });
    const inflight = new Inflight();
    const upstream = new UpstreamLimit({ max: 5, inflight });
    const metrics = new KeepcountMetrics({ registry });
    metrics.addQuota('api', quota).addUpstream('db', upstream, ['primary']);
    // Two: the threshold is ceil(5 / 4) = 2.
    quota.consume('a');
    quota.consume('a');
    upstream.acquire('primary');
    const before = await registry.metrics();
    t.is(sample(before, 'keepcount_tracked_clients', 'policy="api"'), 1);
    t.is(sample(before, 'keepcount_inflight', 'upstream="db",key="primary"'), 1);
    quota.close();
    inflight.close();
    // Before, the closed quota's stats() threw ERR_KEEPCOUNT_CLOSED out of the whole scrape.
    const after = await registry.metrics();
    t.is(sample(after, 'keepcount_decisions_total', 'policy="api",outcome="allowed"'), 2);
    t.is(sample(after, 'keepcount_tracked_clients', 'policy="api"'), undefined);
    t.is(sample(after, 'keepcount_top_talker_requests', 'policy="api",client="a",bound="lower"'), undefined);
    t.is(sample(after, 'keepcount_inflight', 'upstream="db",key="primary"'), undefined);
  },
);

test(title('a synced quota or in-flight counter closed while exported leaves its gauges out too'), async (t) => {
  // Their reads answer from the last state once closed, so they never threw: before, a closed
  // SyncedInflight showed the slots it held at its close for as long as the process ran.
  const registry = new Registry();
  const sync = recordingSync([]);
  const quota = new SyncedWindowQuota({ sync, name: 'q', seed: 7, limit: 5, windowMs: 60_000, heavyHitters: true });
  const inflight = new SyncedInflight({ sync, name: 'i', seed: 7 });
  const upstream = new UpstreamLimit({ max: 5, inflight });
  new KeepcountMetrics({ registry }).addQuota('api', quota).addUpstream('db', upstream, ['primary']);
  quota.consume('a');
  quota.consume('a');
  upstream.acquire('primary');
  const before = await registry.metrics();
  t.is(sample(before, 'keepcount_tracked_clients', 'policy="api"'), 1);
  t.is(sample(before, 'keepcount_top_talker_requests', 'policy="api",client="a",bound="lower"'), 2);
  t.is(sample(before, 'keepcount_inflight', 'upstream="db",key="primary"'), 1);
  t.false(quota.closed || inflight.closed);
  quota.close();
  inflight.close();
  t.true(quota.closed && inflight.closed);
  const after = await registry.metrics();
  t.is(sample(after, 'keepcount_decisions_total', 'policy="api",outcome="allowed"'), 2);
  t.is(sample(after, 'keepcount_tracked_clients', 'policy="api"'), undefined);
  t.is(sample(after, 'keepcount_overflow_requests', 'policy="api"'), undefined);
  t.is(sample(after, 'keepcount_top_talker_requests', 'policy="api",client="a",bound="lower"'), undefined);
  t.is(sample(after, 'keepcount_inflight', 'upstream="db",key="primary"'), undefined);
  await sync.close();
});
