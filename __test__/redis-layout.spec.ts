/**
 * Nodes that would put one key in different cells (another seed, shape or sketch format) never add
 * up their counts in Redis: each layout counts apart, and both sides report the other with
 * ERR_KEEPCOUNT_LAYOUT, once, until it stops syncing. Against a real redis-server on loopback.
 */
import test from 'ava';
import { sketchLayout } from '../lib/redis/hasher.js';
import {
  RedisSync,
  SyncedEstimator,
  SyncedInflight,
  SyncedRate,
  SyncedWindowQuota,
  type SendCommand,
} from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient } from './redis-clients.js';
import { startRedis } from '../tools/redis-server.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

type LayoutError = Error & { code: string; key: string; layout: string; theirs: string };

/** A sync driven by hand (`flush`), its errors collected. */
function node(send: SendCommand, syncMs = 3_600_000): { sync: RedisSync; errors: LayoutError[] } {
  const sync = new RedisSync({ sendCommand: send, syncMs });
  const errors: LayoutError[] = [];
  sync.on('error', (error: LayoutError) => errors.push(error));
  return { sync, errors };
}

test(title('the layout names the sketch format, the shape and a digest of the seed, not the seed'), (t) => {
  const layout = sketchLayout(4, 1024, 0x5eedn);
  t.regex(layout, /^f3-4x1024-[0-9a-f]{8}$/);
  // The digest docs/format.md gives for seed 7.
  t.is(sketchLayout(4, 8192, 7n), 'f3-4x8192-2adb6c84');
  t.false(layout.includes(String(0x5eedn)) || layout.includes('5eed'));
  t.not(sketchLayout(4, 1024, 0x5eeen), layout);
  t.not(sketchLayout(2, 2048, 0x5eedn), layout);
  t.is(sketchLayout(4, 1024, 0x5eedn), layout);
});

test.serial(
  title('a node with another seed counts apart, and it and the others each report the other layout once'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const [a, b, odd] = [node(connection.send), node(connection.send), node(connection.send)];
      const first = new SyncedEstimator({ sync: a.sync, name: 'fleet', seed: 7 });
      const second = new SyncedEstimator({ sync: b.sync, name: 'fleet', seed: 7 });
      const stray = new SyncedEstimator({ sync: odd.sync, name: 'fleet', seed: 8 });
      first.incr('k', 3);
      t.true(await a.sync.flush());
      stray.incr('k', 100);
      t.true(await odd.sync.flush());
      second.incr('k', 4);
      t.true(await b.sync.flush());
      t.true(await a.sync.flush());
      t.true(await odd.sync.flush());
      // The stray 100 reached nobody, and the others' 7 did not reach the stray node.
      t.is(first.get('k'), 7);
      t.is(second.get('k'), 7);
      t.is(stray.get('k'), 100);
      const [ours, theirs] = [sketchLayout(4, 8192, 7n), sketchLayout(4, 8192, 8n)];
      t.is(odd.errors.length, 1, 'once, though the odd node synced twice');
      t.like(odd.errors[0], {
        code: 'ERR_KEEPCOUNT_LAYOUT',
        key: `keepcount:{fleet}:e:${theirs}`,
        layout: theirs,
        theirs: ours,
      });
      t.regex(odd.errors[0]!.message, /same seed, hashes and slots/);
      for (const side of [a, b]) {
        t.is(side.errors.length, 1);
        t.like(side.errors[0], { code: 'ERR_KEEPCOUNT_LAYOUT', key: `keepcount:{fleet}:e:${ours}`, theirs });
      }
      // Each group's Redis entry holds its own counts.
      for (const layout of [ours, theirs])
        t.is(await connection.send(['EXISTS', `keepcount:{fleet}:e:${layout}:c`]), 1);
      await Promise.all([a.sync.close(), b.sync.close(), odd.sync.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('another shape counts apart too, for a rate’s windows and an in-flight count alike'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('redis', server.port);
  try {
    // Lease-holding entries need a lease within an hour, so syncs here are a minute apart.
    const [a, odd] = [node(connection.send, 60_000), node(connection.send, 60_000)];
    const rate = new SyncedRate({ sync: a.sync, name: 'r', intervalMs: 3_600_000, seed: 7 });
    const other = new SyncedRate({ sync: odd.sync, name: 'r', intervalMs: 3_600_000, seed: 7, slots: 2048 });
    const inA = new SyncedInflight({ sync: a.sync, name: 'i', seed: 7 });
    const inOdd = new SyncedInflight({ sync: odd.sync, name: 'i', seed: 7, hashes: 3 });
    rate.observe('k', 2);
    inA.incr('k', 1);
    t.true(await a.sync.flush());
    other.observe('k', 5);
    inOdd.incr('k', 9);
    t.true(await odd.sync.flush());
    t.true(await a.sync.flush());
    t.is(rate.observe('k', 0), 2);
    t.is(other.observe('k', 0), 5);
    t.is(inA.get('k'), 1);
    t.is(inOdd.get('k'), 9);
    t.deepEqual(odd.errors.map((e) => [e.code, e.theirs]).sort(), [
      ['ERR_KEEPCOUNT_LAYOUT', `${sketchLayout(4, 1024, 7n)}-w3600000`],
      ['ERR_KEEPCOUNT_LAYOUT', sketchLayout(4, 8192, 7n)],
    ]);
    t.deepEqual(
      a.errors.map((e) => e.theirs).sort(),
      [sketchLayout(3, 8192, 7n), `${sketchLayout(4, 2048, 7n)}-w3600000`].sort(),
    );
    await Promise.all([a.sync.close(), odd.sync.close()]);
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(title('quotas of one name with another window count apart and report each other'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    const [a, b] = [node(connection.send), node(connection.send)];
    const minute = new SyncedWindowQuota({ sync: a.sync, name: 'q', seed: 7, limit: 10, windowMs: 60_000 });
    const hour = new SyncedWindowQuota({ sync: b.sync, name: 'q', seed: 7, limit: 10, windowMs: 3_600_000 });
    minute.consume('k', 3);
    hour.consume('k', 4);
    for (const side of [a, b, a]) t.true(await side.sync.flush());
    // Separate windows' keys: neither sees the other's count (before, neither said so either).
    t.is(minute.current('k').count, 3);
    t.is(hour.current('k').count, 4);
    // A quota's default sketch: 4 rows sized for its default 10,000 clients.
    const layout = sketchLayout(4, 51072, 7n);
    t.like(a.errors[0], { code: 'ERR_KEEPCOUNT_LAYOUT', layout: `${layout}-w60000`, theirs: `${layout}-w3600000` });
    t.like(b.errors[0], { code: 'ERR_KEEPCOUNT_LAYOUT', layout: `${layout}-w3600000`, theirs: `${layout}-w60000` });
    t.regex(a.errors[0]!.message, /\(and window\)/);
    await Promise.all([a.sync.close(), b.sync.close()]);
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(
  title('a reconfigured fleet starts from zero in its own keys, and hears of the old layout until it stops'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // A layout is live for 10 sync periods of the node asking: 10 × 20 ms here.
      const [old, next, reader] = [node(connection.send, 20), node(connection.send, 20), node(connection.send, 20)];
      const before = new SyncedEstimator({ sync: old.sync, name: 'moved', seed: 7 });
      const after = new SyncedEstimator({ sync: next.sync, name: 'moved', seed: 9 });
      before.incr('k', 50);
      t.true(await old.sync.flush());
      after.incr('k', 6);
      t.true(await next.sync.flush());
      t.is(next.errors.length, 1);
      await old.sync.close();
      await sleep(400);
      // Past the old layout's liveness: a node of the new one hears of nobody, and both new nodes
      // see the 6 and none of the old 50.
      const observer = new SyncedEstimator({ sync: reader.sync, name: 'moved', seed: 9 });
      t.true(await reader.sync.flush());
      t.is(observer.get('k'), 6);
      t.is(after.get('k'), 6);
      t.deepEqual(reader.errors, []);
      // The old layout, back, is heard of again: once more by the node that heard of it before.
      const back = node(connection.send, 20);
      const returned = new SyncedEstimator({ sync: back.sync, name: 'moved', seed: 7 });
      t.true(await back.sync.flush());
      t.is(returned.get('k'), 50);
      t.like(back.errors[0], { code: 'ERR_KEEPCOUNT_LAYOUT', theirs: sketchLayout(4, 8192, 9n) });
      t.true(await next.sync.flush());
      t.is(next.errors.length, 2);
      t.is(next.errors[1]!.theirs, sketchLayout(4, 8192, 7n));
      await Promise.all([next.sync.close(), reader.sync.close(), back.sync.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('a reply names at most 16 other layouts, however many nodes each have their own seed'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    const nodes = Array.from({ length: 18 }, () => node(connection.send));
    nodes.forEach((n, i) => new SyncedEstimator({ sync: n.sync, name: 'scattered', seed: i }).incr('k'));
    for (const n of nodes) t.true(await n.sync.flush());
    // The last node found 17 other layouts live, and was told of 16.
    t.is(nodes[17]!.errors.length, 16);
    t.true(nodes[17]!.errors.every((e) => e.code === 'ERR_KEEPCOUNT_LAYOUT' && e.theirs !== e.layout));
    await Promise.all(nodes.map((n) => n.sync.close()));
  } finally {
    await connection.close();
    await server.stop();
  }
});
