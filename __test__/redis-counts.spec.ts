/**
 * keepcount/redis counts exactly across nodes, against real redis-server processes (started here,
 * on loopback) and real node processes, with both client libraries: replayed flushes count once,
 * syncs too large for one round arrive over the next, and synced sketches put keys where this
 * backend's Estimator does.
 */
import test from 'ava';
import { Estimator } from '../lib/index.js';
import { KeyHasher } from '../lib/redis/hasher.js';
import {
  RedisSync,
  SyncedEstimator,
  SyncedInflight,
  SyncedLimiter,
  SyncedRate,
  SyncedWindowQuota,
  type SendCommand,
} from '../lib/redis/index.js';
import { title } from './helpers.js';
import { until } from './waits.js';
import { clientNames, connectClient } from './redis-clients.js';
import { countNodes, readTotals } from './redis-nodes.js';
import { startRedis } from '../tools/redis-server.js';

for (const client of clientNames) {
  test.serial(title(`${client}: a flush sent twice, and every flush replayed later, counts once`), async (t) => {
    const server = await startRedis();
    const connection = await connectClient(client, server.port);
    try {
      const sent: string[][] = [];
      // Every script call goes twice, as a retry after a timeout that actually succeeded would.
      const twice: SendCommand = async (args) => {
        sent.push(args);
        await connection.send(args);
        return connection.send(args);
      };
      const sync = new RedisSync({ sendCommand: twice, syncMs: 3_600_000 });
      const sketch = new SyncedEstimator({ sync, name: 'dup', seed: 7 });
      for (let round = 1; round <= 3; round++) {
        sketch.incr('k0', 5);
        t.true(await sync.flush());
      }
      await sync.close();
      // Old flushes arriving after newer ones (a stopped connection drained late) change nothing.
      for (const args of sent) await connection.send(args);
      t.deepEqual((await readTotals(server, client, 'dup')).sketch, [15, ...Array(9).fill(0)]);
    } finally {
      await connection.close();
      await server.stop();
    }
  });
}

test.serial(
  title(
    'a process under a nodeId another synced with first fails its syncs with ERR_KEEPCOUNT_NODE_ID, never silently',
  ),
  async (t) => {
    // A restart, or a second process, under one id: Redis keeps the id's record for the process
    // that wrote it, so none of the second's syncs is applied, however many it makes. A sync sent
    // twice (the test above) stays a success: it is the same process's.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const node = (what: 'sketch' | 'limiter') => {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, nodeId: 'host-a' });
      const errors: (Error & { code?: string })[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      const count =
        what === 'sketch'
          ? (() => {
              const sketch = new SyncedEstimator({ sync, name: 'reused', seed: 7 });
              return () => sketch.incr('k', 5);
            })()
          : (() => {
              const limiter = new SyncedLimiter({ sync, name: 'reused', limit: { perSecond: 10, burst: 10 } });
              return () => void limiter.check('client');
            })();
      return { sync, errors, count };
    };
    try {
      for (const what of ['sketch', 'limiter'] as const) {
        const first = node(what);
        for (let i = 0; i < 3; i++) {
          first.count();
          t.true(await first.sync.flush(), what);
        }
        const second = node(what);
        second.count();
        // More syncs than the first made: before, the one whose number equalled the first's last
        // passed for a replay (a success that applied nothing), and the ones after took the
        // first's record over, its counts replaced by the second's.
        for (let i = 0; i < 6; i++) t.false(await second.sync.flush(), `${what}: the second process's sync ${i} fails`);
        t.deepEqual(
          second.errors.map((error) => error.code),
          Array(6).fill('ERR_KEEPCOUNT_NODE_ID'),
          what,
        );
        if (what === 'sketch') {
          const observer = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
          const sketch = new SyncedEstimator({ sync: observer, name: 'reused', seed: 7 });
          t.true(await observer.flush());
          t.is(sketch.get('k'), 15, "the first process's counts stand");
          await observer.close();
        }
        t.regex(second.errors[0]!.message, /node id "host-a"/);
        first.count();
        t.true(await first.sync.flush(), `${what}: the first goes on`);
        t.deepEqual(first.errors, []);
        await Promise.all([first.sync.close(), second.sync.close()]);
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('sync.ready() rejects with ERR_KEEPCOUNT_NODE_ID when Redis refuses the node id, with or without a listener'),
  async (t) => {
    // A SyncedEstimator's record never expires: the refusal is for good, and ready() kept trying
    // every syncMs, never settling, silently without an 'error' listener.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const first = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, nodeId: 'host-b' });
      new SyncedEstimator({ sync: first, name: 'ready-refused', seed: 7 }).incr('k');
      await first.ready();
      for (const listening of [true, false]) {
        const second = new RedisSync({ sendCommand: connection.send, syncMs: 50, nodeId: 'host-b' });
        if (listening) second.on('error', () => {});
        new SyncedEstimator({ sync: second, name: 'ready-refused', seed: 7 });
        const started = performance.now();
        await t.throwsAsync(second.ready(), { code: 'ERR_KEEPCOUNT_NODE_ID', message: /node id "host-b"/ });
        t.true(performance.now() - started < 5_000, 'at its first refused sync, not after a wait');
        await second.close();
      }
      await first.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a restart under a fixed nodeId forgets the dead process's slots once their lease runs out, alone"),
  async (t) => {
    // No other node syncs the counter (none would reap the old record): the restart forgets it.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const process = (send: SendCommand) => {
        const sync = new RedisSync({ sendCommand: send, syncMs: 50, nodeId: 'host-a' });
        const errors: (Error & { code?: string })[] = [];
        sync.on('error', (error: Error) => errors.push(error));
        return { sync, errors, slots: new SyncedInflight({ sync, name: 'restarted', seed: 7, leaseMs: 300 }) };
      };
      let dead = false;
      const first = process((args) => (dead ? Promise.reject(new Error('gone')) : connection.send(args)));
      for (let i = 0; i < 5; i++) first.slots.enter('old');
      first.slots.enter('pay');
      // Syncs on its timer as well: more of them than the restart will need to catch up.
      await until(() => first.sync.stats.syncs >= 10, 'the first process syncs 10 times');
      dead = true;
      const diedAt = performance.now();
      const second = process(connection.send);
      second.slots.enter('pay');
      second.slots.enter('pay');
      await until(() => second.sync.flush(), "the restart's sync is applied");
      t.true(performance.now() - diedAt >= 250, "not before the first process's lease ran out");
      t.true(second.errors.length > 0 && second.errors.every((error) => error.code === 'ERR_KEEPCOUNT_NODE_ID'));
      const observer = new RedisSync({ sendCommand: connection.send, syncMs: 50 });
      const slots = new SyncedInflight({ sync: observer, name: 'restarted', seed: 7, leaseMs: 300 });
      t.true(await observer.flush());
      // Before, the restart took the record over once its numbers caught up: old read 5 for good.
      t.deepEqual([slots.get('old'), slots.get('pay')], [0, 2]);
      await Promise.all([first.sync.close(), second.sync.close(), observer.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a SyncedLimiter restarted under its nodeId is refused, applying nothing, until the lease runs out'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const bucket = 'keepcount:{restarted-l}:b:k';
      const process = (send: SendCommand) => {
        const sync = new RedisSync({ sendCommand: send, syncMs: 50, nodeId: 'host-a' });
        const errors: (Error & { code?: string })[] = [];
        sync.on('error', (error: Error) => errors.push(error));
        const limit = { perSecond: 100, burst: 100 };
        return { sync, errors, limiter: new SyncedLimiter({ sync, name: 'restarted-l', limit, leaseMs: 300 }) };
      };
      let dead = false;
      const first = process((args) => (dead ? Promise.reject(new Error('gone')) : connection.send(args)));
      await first.sync.ready();
      first.limiter.check('k');
      await until(() => first.sync.stats.syncs >= 6, 'the first process syncs a few times');
      dead = true;
      const diedAt = performance.now();
      const owner = await connection.send(['HGET', bucket, 'p:host-a']);
      const second = process(connection.send);
      for (let i = 0; i < 20; i++) second.limiter.check('k');
      t.false(await second.sync.flush(), 'within the lease: refused');
      t.is(await connection.send(['HGET', bucket, 'p:host-a']), owner, 'nothing of the refused sync applied');
      // Before, the limiter's node count had no lease: refused for good, ready() never resolved.
      let ready = false;
      second.sync.ready().then(
        () => (ready = true),
        () => undefined,
      );
      await until(() => ready, 'the restart is ready');
      t.true(performance.now() - diedAt >= 250, "not before the first process's lease ran out");
      t.true(second.errors.every((error) => error.code === 'ERR_KEEPCOUNT_NODE_ID'));
      t.true(second.limiter.check('k').allowed, 'the restart serves');
      await Promise.all([first.sync.close(), second.sync.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('ioredis: 3 node processes × 3,000 increments give the exact global total'), async (t) => {
  const server = await startRedis();
  try {
    const results = await countNodes(server, 'ioredis', 'exact', 3, 3000, 500);
    t.deepEqual(
      results.map((r) => r.thrown),
      [0, 0, 0],
    );
    // 10 keys in a 4 × 8192 sketch with a fixed seed: no key shares all 4 counters with another.
    // The same requests on a quota counting every key exactly give the same totals.
    t.deepEqual(await readTotals(server, 'ioredis', 'exact'), {
      sketch: Array(10).fill(900),
      exact: Array(10).fill(900),
    });
  } finally {
    await server.stop();
  }
});

test.serial(title('more cells than one sync carries arrive over the next syncs, none lost'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    const writerSync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
    const readerSync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
    const writer = new SyncedEstimator({ sync: writerSync, name: 'wide', seed: 7 });
    const reader = new SyncedEstimator({ sync: readerSync, name: 'wide', seed: 7 });
    // 5,000 keys touch about 15,000 of the 32,768 counters (8,192 × (1 − e^(−5000/8192)) per row):
    // eight pushes of 2,048, four pulls of 4,096.
    const keys = Array.from({ length: 5000 }, (_, i) => `key-${i}`);
    keys.forEach((key, i) => writer.incr(key, 1 + (i % 7)));
    t.true(await readerSync.flush());
    t.false(
      keys.every((key) => reader.get(key) === writer.get(key)),
      'one sync is not enough',
    );
    for (let i = 0; i < 10; i++) t.true(await writerSync.flush());
    for (let i = 0; i < 6; i++) t.true(await readerSync.flush());
    t.true(keys.every((key) => reader.get(key) === writer.get(key)));
    t.true(writerSync.stats.cellsPushed > 7 * 2048);
    await writerSync.close();
    await readerSync.close();
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(title('nodes syncing one name every 50 ms and every 1,000 ms count each other all along'), async (t) => {
  // Before, each sync dropped from the registry the nodes not seen within its own liveness period
  // (10 of its syncs): the fast node dropped the slow one between its syncs, and counted 1 node.
  // Fails falsely only if the fast node's timer stalls 500 ms (its own liveness period).
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    const nodes = [50, 1000].map((syncMs) => {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs });
      const quota = new SyncedWindowQuota({ sync, name: 'mixed', seed: 7, limit: 100, windowMs: 60_000 });
      const limiter = new SyncedLimiter({ sync, name: 'mixed-l', limit: { perSecond: 10, burst: 100 } });
      return { sync, quota, limiter };
    });
    for (const { sync } of nodes) t.true(await sync.flush());
    const counted = (): string[] => nodes.map(({ quota, limiter }) => `${quota.nodes}/${limiter.nodes}`);
    await until(() => counted().every((c) => c === '2/2'), 'both nodes count 2');
    const seen = new Set<string>();
    for (let i = 0; i < 60; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      for (const c of counted()) seen.add(c);
    }
    t.deepEqual([...seen], ['2/2'], 'quota/limiter node counts seen over 3 s');
    for (const { sync } of nodes) await sync.close();
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(
  title("counts after their sync closed throw ERR_KEEPCOUNT_CLOSED; a quota's decide by its fail policy"),
  async (t) => {
    // Before, they were taken and never pushed: the fleet never saw them. A quota's consume is the
    // request path, which never throws because of the sync: a closed one is stale for good.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      const sketch = new SyncedEstimator({ sync, name: 'after-close', seed: 7 });
      const quota = new SyncedWindowQuota({
        sync,
        name: 'after-close-q',
        seed: 7,
        limit: 5,
        windowMs: 60_000,
        failPolicy: 'closed',
      });
      const rate = new SyncedRate({ sync, name: 'after-close-r', seed: 7, intervalMs: 60_000 });
      sketch.incr('k', 7);
      rate.observe('k');
      t.true(quota.consume('k').allowed);
      t.false(sync.closed);
      const closing = sync.close();
      t.true(sync.closed);
      const closed = {
        code: 'ERR_KEEPCOUNT_CLOSED',
        message: /^The RedisSync of this Synced(Estimator|Rate) was closed: it counts no more/,
      };
      for (const count of [() => sketch.incr('k'), () => sketch.decr('k'), () => rate.observe('k')]) {
        t.throws(count, closed);
      }
      const decision = quota.consume('k');
      t.is(decision.allowed, false, "refused by the 'closed' fail policy, not thrown");
      t.is(decision.count, 2, 'counted on this node alone');
      quota.adjust('k', -1);
      t.true(await closing);
      t.is(sketch.get('k'), 7);
      t.is(quota.current('k').count, 1);
      const readerSync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      const reader = new SyncedEstimator({ sync: readerSync, name: 'after-close', seed: 7 });
      t.true(await readerSync.flush());
      t.is(reader.get('k'), 7, 'what was counted before the close was pushed by its last sync');
      await readerSync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('a sketch closed before its sync is pushed by the next sync, then no longer synced'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    let calls = 0;
    const counted: SendCommand = (args) => {
      calls++;
      return connection.send(args);
    };
    const writerSync = new RedisSync({ sendCommand: counted, syncMs: 3_600_000 });
    const writer = new SyncedEstimator({ sync: writerSync, name: 'closed', seed: 7 });
    for (let i = 0; i < 100; i++) writer.incr('k');
    // Closed before any sync, as a shutdown closes structures before their sync: nothing is lost.
    writer.close();
    t.true(await writerSync.flush());
    // The script call (and its NOSCRIPT retry, the first time).
    const sent = calls;
    t.true(sent > 0);
    // Everything it counted went: it is synced no more.
    t.true(await writerSync.flush());
    t.is(calls, sent);
    await writerSync.close();
    const readerSync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
    const reader = new SyncedEstimator({ sync: readerSync, name: 'closed', seed: 7 });
    t.true(await readerSync.flush());
    t.is(reader.get('k'), 100);
    await readerSync.close();
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(
  title('each structure counts the nodes that sync it, not those of its neighbours or of another kind'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // Three nodes sync the sketch "hits"; only the first has the quota "api", and the other two a
      // limiter also named "hits" (another kind under the same name).
      const nodes = ['a', 'b', 'c'].map((nodeId, n) => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, nodeId });
        const sketch = new SyncedEstimator({ sync, name: 'hits', seed: 7 });
        const quota =
          n === 0
            ? new SyncedWindowQuota({ sync, name: 'api', seed: 7, limit: 90, windowMs: 60_000, failPolicy: 'local' })
            : undefined;
        const limiter =
          n > 0 ? new SyncedLimiter({ sync, name: 'hits', limit: { perSecond: 10, burst: 10 } }) : undefined;
        return { sync, sketch, quota, limiter };
      });
      // Twice: a node's first sync may come before the others have registered.
      for (let round = 0; round < 2; round++) for (const { sync } of nodes) t.true(await sync.flush());
      const [a, b, c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
      t.deepEqual(
        nodes.map(({ sketch }) => sketch.nodes),
        [3, 3, 3],
      );
      t.is(a.quota?.nodes, 1);
      // Alone on its quota, the node keeps the whole limit when Redis goes away.
      t.is(a.quota?.share(), 90);
      t.is(b.limiter?.nodes, 2);
      t.is(c.limiter?.nodes, 2);
      t.deepEqual(
        nodes.map(({ sync }) => sync.nodes),
        [3, 3, 3],
      );
      // Until its first sync a new structure takes its sync's count, then its own.
      const late = new SyncedRate({ sync: a.sync, name: 'late', seed: 7, intervalMs: 60_000 });
      t.is(late.nodes, 3);
      t.true(await a.sync.flush());
      t.is(late.nodes, 1);
      for (const { sync } of nodes) await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test(title('synced sketches put every key where this backend’s Estimator does'), (t) => {
  const keys = ['', 'k0', '203.0.113.7', 'żółw 🐢', 0, 1, -1, 2 ** 53 - 1, 1n, -(2n ** 63n), new Uint8Array([1, 2, 3])];
  for (const [hashes, slots, seed] of [
    [4, 8192, 7],
    [1, 1, 0],
    [5, 1000, 2n ** 64n - 1n],
  ] as const) {
    const estimator = new Estimator({ hashes, slots, seed });
    const hasher = new KeyHasher(hashes, slots, seed);
    for (const key of keys) t.deepEqual(Array.from(hasher.indexes(key)), estimator.counterIndexes(key), String(key));
    estimator.close();
  }
});
