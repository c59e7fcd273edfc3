/**
 * keepcount/redis against real redis-server processes (started here, on loopback) and real node
 * processes, with both client libraries.
 */
import express from 'express';
import { createServer } from 'node:http';
import test from 'ava';
import { rateLimit } from '../lib/http/index.js';
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
import { runFixture, throwsShape, title } from './helpers.js';
import { close, get, listen } from './http-client.js';
import { clientNames, connectClient, type ClientName } from './redis-clients.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `nodes` count-mode node processes together; resolves with their parsed results. */
async function countNodes(
  server: RedisServer,
  client: ClientName,
  name: string,
  nodes: number,
  increments: number,
  spreadMs: number,
): Promise<{ thrown: number; errors: number; synced: boolean }[]> {
  const job = { mode: 'count', client, port: server.port, name, seed: 7, syncMs: 50, increments, spreadMs };
  const runs = await Promise.all(
    Array.from({ length: nodes }, () => runFixture('redis-node.ts', { args: [JSON.stringify(job)] })),
  );
  return runs.map((run) => {
    if (run.code !== 0) throw new Error(`node exited with ${run.code}: ${run.stderr}`);
    return JSON.parse(run.stdout) as { thrown: number; errors: number; synced: boolean };
  });
}

/** Resolves once `nodes` nodes have synced `name` (so they are running), polling its node registry. */
async function waitForNodes(server: RedisServer, name: string, nodes: number): Promise<void> {
  const connection = await connectClient('ioredis', server.port);
  try {
    const deadline = performance.now() + 20_000;
    while (Number(await connection.send(['ZCARD', `keepcount:{${name}}:nodes`])) < nodes) {
      if (performance.now() > deadline) throw new Error(`${nodes} nodes never synced ${name}`);
      await sleep(20);
    }
  } finally {
    await connection.close();
  }
}

/** The fleet-wide counts of `k0`..`k9` as a fresh node reads them after one sync. */
async function readTotals(server: RedisServer, client: ClientName, name: string): Promise<number[]> {
  const connection = await connectClient(client, server.port);
  const sync = new RedisSync({ sendCommand: connection.send });
  const sketch = new SyncedEstimator({ sync, name, seed: 7 });
  const ok = await sync.flush();
  await sync.close();
  await connection.close();
  if (!ok) throw new Error('could not sync');
  return Array.from({ length: 10 }, (_, i) => sketch.get(`k${i}`));
}

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
      t.deepEqual(await readTotals(server, client, 'dup'), [15, ...Array(9).fill(0)]);
    } finally {
      await connection.close();
      await server.stop();
    }
  });

  test.serial(title(`${client}: Redis stopped (SIGSTOP) mid-run: no throw, exact totals after SIGCONT`), async (t) => {
    const server = await startRedis();
    try {
      const running = countNodes(server, client, 'stop', 3, 3000, 2000);
      await waitForNodes(server, 'stop', 3);
      await sleep(300);
      server.pause();
      await sleep(1500);
      server.resume();
      const results = await running;
      t.deepEqual(
        results.map((r) => r.thrown),
        [0, 0, 0],
      );
      // A node starved of CPU for the whole stop (this machine is shared) may never see a timeout.
      t.true(
        results.some((r) => r.errors > 0),
        'the nodes saw their syncs time out',
      );
      t.deepEqual(await readTotals(server, client, 'stop'), Array(10).fill(900));
    } finally {
      await server.stop();
    }
  });
}

test.serial(title('ioredis: 3 node processes × 3,000 increments give the exact global total'), async (t) => {
  const server = await startRedis();
  try {
    const results = await countNodes(server, 'ioredis', 'exact', 3, 3000, 500);
    t.deepEqual(
      results.map((r) => r.thrown),
      [0, 0, 0],
    );
    // 10 keys in a 4 × 8192 sketch with a fixed seed: no key shares all 4 counters with another.
    t.deepEqual(await readTotals(server, 'ioredis', 'exact'), Array(10).fill(900));
  } finally {
    await server.stop();
  }
});

test.serial(title('redis: Redis killed and restarted mid-run (append-only) loses and doubles nothing'), async (t) => {
  const server = await startRedis({ appendonly: true });
  try {
    const running = countNodes(server, 'redis', 'restart', 3, 3000, 2000);
    await waitForNodes(server, 'restart', 3);
    await sleep(500);
    await server.restart();
    const results = await running;
    t.deepEqual(
      results.map((r) => [r.thrown, r.synced]),
      [
        [0, true],
        [0, true],
        [0, true],
      ],
    );
    t.deepEqual(await readTotals(server, 'redis', 'restart'), Array(10).fill(900));
  } finally {
    await server.stop();
  }
});

test.serial(title('ioredis: a restart that loses the data is rebuilt from the nodes’ own counts'), async (t) => {
  const server = await startRedis();
  try {
    // Nodes must still be running at the restart to rebuild what it lost (a node gone by then
    // takes its counts with it): they spread their increments over 6 s, the restart comes 0.5 s
    // after all three first synced, leaving a loaded machine seconds of margin.
    const running = countNodes(server, 'ioredis', 'rebuild', 3, 3000, 6000);
    await waitForNodes(server, 'rebuild', 3);
    await sleep(500);
    await server.restart();
    const results = await running;
    t.deepEqual(
      results.map((r) => r.thrown),
      [0, 0, 0],
    );
    t.deepEqual(await readTotals(server, 'ioredis', 'rebuild'), Array(10).fill(900));
  } finally {
    await server.stop();
  }
});

test.serial(
  title('a restart from an older snapshot (or a lagging replica) is rebuilt from the nodes’ own counts'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const nodes = [0, 1].map(() => {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      return { sync, sketch: new SyncedEstimator({ sync, name: 'rollback', seed: 7 }) };
    });
    const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
    const flushBoth = async () => t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
    try {
      a.sketch.incr('k0', 5);
      b.sketch.incr('k0', 1);
      await flushBoth();
      await connection.send(['SAVE']);
      // Acknowledged after the snapshot: lost by the restart, which keeps the same incarnation.
      a.sketch.incr('k0', 3);
      a.sketch.incr('k1', 2);
      b.sketch.incr('k2', 4);
      await flushBoth();
      await flushBoth();
      await server.restart();
      await flushBoth();
      // Pushed under versions the nodes had already pulled past before the restart.
      a.sketch.incr('k3');
      await flushBoth();
      await flushBoth();
      t.deepEqual(await readTotals(server, 'ioredis', 'rollback'), [9, 2, 4, 1, ...Array(6).fill(0)]);
      t.deepEqual(
        ['k0', 'k1', 'k2', 'k3'].map((key) => b.sketch.get(key)),
        [9, 2, 4, 1],
      );
    } finally {
      for (const node of nodes) await node.sync.close();
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a sketch whose keys Redis lost in part (evicted, deleted) is rebuilt, nothing counted twice'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // What maxmemory eviction may take (each key alone), and the whole entry's metadata.
      for (const lost of ['n:a', 'n:b', 'c', 'v', 'm']) {
        const name = `partial-${lost}`;
        const nodes = ['a', 'b'].map((nodeId) => {
          const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, nodeId: `${name}-${nodeId}` });
          return { sync, sketch: new SyncedEstimator({ sync, name, seed: 7 }) };
        });
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        const flushBoth = async () => t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true], lost);
        a.sketch.incr('k0', 5);
        b.sketch.incr('k0', 1);
        await flushBoth();
        const key = lost.startsWith('n:') ? `n:${name}-${lost.slice(2)}` : lost;
        t.is(await connection.send(['DEL', `keepcount:{${name}}:e:${key}`]), 1, lost);
        a.sketch.incr('k0', 3);
        b.sketch.incr('k1', 2);
        for (let i = 0; i < 3; i++) await flushBoth();
        t.deepEqual(await readTotals(server, 'ioredis', name), [9, 2, ...Array(8).fill(0)], lost);
        t.deepEqual(
          nodes.map((node) => [node.sketch.get('k0'), node.sketch.get('k1')]),
          [
            [9, 2],
            [9, 2],
          ],
          lost,
        );
        for (const node of nodes) await node.sync.close();
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

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

test.serial(title('windows roll over together on every node, by the wall clock'), async (t) => {
  const server = await startRedis();
  const a = await connectClient('ioredis', server.port);
  const b = await connectClient('redis', server.port);
  try {
    let now = 1_000_000 * 1000 + 500;
    const clock = { now: () => now };
    const syncA = new RedisSync({ sendCommand: a.send, syncMs: 3_600_000 });
    const syncB = new RedisSync({ sendCommand: b.send, syncMs: 3_600_000 });
    const rateA = new SyncedRate({ sync: syncA, name: 'win', seed: 7, intervalMs: 1000, clock });
    const rateB = new SyncedRate({ sync: syncB, name: 'win', seed: 7, intervalMs: 1000, clock });
    t.is(rateA.observe('x', 3), 3);
    t.is(rateB.observe('x', 4), 4, 'B has not synced: it sees only its own');
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 7);
    t.is(rateB.observe('x', 0), 7);
    now += 1000;
    t.is(rateA.observe('x', 1), 1, 'a new window starts empty');
    t.is(rateA.rate('x'), 7, 'the previous window reads the fleet total');
    t.is(rateB.rate('x'), 7);
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    t.is(rateB.observe('x', 0), 1);
    now += 2000;
    t.is(rateB.rate('x'), 0, 'two windows on, nothing is left');
    await syncA.close();
    await syncB.close();
  } finally {
    await a.close();
    await b.close();
    await server.stop();
  }
});

test.serial(title('a node whose clock runs ahead counts into the next window early'), async (t) => {
  const server = await startRedis();
  const a = await connectClient('ioredis', server.port);
  const b = await connectClient('ioredis', server.port);
  try {
    let now = 2_000_000 * 1000 + 800;
    const syncA = new RedisSync({ sendCommand: a.send, syncMs: 3_600_000 });
    const syncB = new RedisSync({ sendCommand: b.send, syncMs: 3_600_000 });
    const rateA = new SyncedRate({ sync: syncA, name: 'skew', seed: 7, intervalMs: 1000, clock: { now: () => now } });
    // B's clock is 300 ms ahead: at A's 800 ms it is already in the next window.
    const rateB = new SyncedRate({
      sync: syncB,
      name: 'skew',
      seed: 7,
      intervalMs: 1000,
      clock: { now: () => now + 300 },
    });
    rateA.observe('x', 2);
    rateB.observe('x', 5);
    t.true(await syncB.flush());
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 2, "B's events are not in A's window");
    now += 300;
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 5, 'A finds them once its clock reaches the window');
    await syncA.close();
    await syncB.close();
  } finally {
    await a.close();
    await b.close();
    await server.stop();
  }
});

test.serial(
  title('Redis stopped: checks keep answering, staleness grows, errors are emitted, fail policies apply'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 50, timeoutMs: 300, staleAfterMs: 400 });
      const errors: Error[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      const quota = (failPolicy: 'local' | 'open' | 'closed'): SyncedWindowQuota =>
        new SyncedWindowQuota({
          sync,
          name: `fail-${failPolicy}`,
          seed: 7,
          limit: 10,
          windowMs: 3_600_000,
          failPolicy,
        });
      const local = quota('local');
      const open = quota('open');
      const closed = quota('closed');
      t.true(await sync.flush());
      t.false(sync.stale);
      t.true(closed.consume('k').allowed);
      server.pause();
      await sleep(1000);
      t.true(sync.stale);
      t.true(sync.staleness >= 400);
      t.true(errors.length > 0);
      t.like(errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Redis sync timed out after 300 ms' });
      t.false(closed.consume('k').allowed, "'closed' refuses while stale");
      t.true(open.consume('k').allowed, "'open' decides on the last known count");
      // One node known: its share is the whole limit.
      const admitted = Array.from({ length: 12 }, () => local.consume('k').allowed).filter(Boolean).length;
      t.is(admitted, 10);
      server.resume();
      const deadline = performance.now() + 5000;
      while (sync.stale && performance.now() < deadline) await sleep(20);
      t.false(sync.stale);
      t.true(closed.consume('k').allowed, 'fresh again');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("'local' fail policy: each stale node admits its share of the limit, by the last node count"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const nodes = Array.from({ length: 3 }, () => {
        const sync = new RedisSync({
          sendCommand: connection.send,
          syncMs: 3_600_000,
          timeoutMs: 100,
          staleAfterMs: 150,
        });
        const quota = new SyncedWindowQuota({ sync, name: 'share', seed: 7, limit: 10, windowMs: 3_600_000 });
        return { sync, quota };
      });
      for (const { sync } of nodes) t.true(await sync.flush());
      for (const { sync } of nodes) t.true(await sync.flush());
      t.deepEqual(
        nodes.map(({ sync }) => sync.nodes),
        [3, 3, 3],
      );
      server.pause();
      for (const { sync } of nodes) t.false(await sync.flush());
      await sleep(200);
      t.true(nodes.every(({ sync }) => sync.stale));
      // floor(10 / 3) = 3 each: 9 admitted fleet-wide, within the limit, with no sync at all.
      const admitted = nodes.map(
        ({ quota }) => Array.from({ length: 5 }, () => quota.consume('k').allowed).filter(Boolean).length,
      );
      t.deepEqual(admitted, [3, 3, 3]);
      server.resume();
      for (const { sync } of nodes) await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('3 node processes overshoot a shared limit by no more than the stated bound'), async (t) => {
  const server = await startRedis();
  try {
    const syncMs = 50;
    const limit = 2000;
    const job = {
      mode: 'quota',
      client: 'ioredis',
      port: server.port,
      name: 'overshoot',
      seed: 7,
      syncMs,
      limit,
      startAt: Date.now() + 2000,
      durationMs: 1500,
      perMs: 5,
    };
    const runs = await Promise.all(
      Array.from({ length: 3 }, () => runFixture('redis-node.ts', { args: [JSON.stringify(job)] })),
    );
    const results = runs.map((run) => {
      if (run.code !== 0) throw new Error(`node exited with ${run.code}: ${run.stderr}`);
      return JSON.parse(run.stdout) as {
        admitted: number;
        attempts: number;
        elapsedMs: number;
        maxSyncGapMs: number;
        commands: number;
      };
    });
    const admitted = results.reduce((sum, r) => sum + r.admitted, 0);
    // The bound: limit + (nodes − 1) × r × 2 × (syncMs + RTT), with r the fastest node's attempt
    // rate (an upper bound on its admission rate) and syncMs + RTT the longest measured gap
    // between one node's successful syncs (it includes event-loop delays on this shared machine).
    const r = Math.max(...results.map((x) => x.attempts / x.elapsedMs));
    const gap = Math.max(...results.map((x) => x.maxSyncGapMs));
    const bound = limit + (results.length - 1) * r * 2 * gap;
    const commandsPerSecond = results.map((x) => (x.commands / x.elapsedMs) * 1000);
    t.log(
      `admitted ${admitted} of limit ${limit} (overshoot ${admitted - limit}); bound ${Math.floor(bound)} ` +
        `(r ${r.toFixed(2)}/ms, longest sync gap ${gap.toFixed(1)} ms); ` +
        `commands/s per node ${commandsPerSecond.map((c) => c.toFixed(1)).join(', ')}`,
    );
    t.true(admitted >= limit, 'the limit itself is admitted');
    t.true(admitted <= bound);
  } finally {
    await server.stop();
  }
});

test.serial(title('two Express servers with rateLimit on one SyncedWindowQuota share the limit'), async (t) => {
  const server = await startRedis();
  const connections = await Promise.all(clientNames.map((name) => connectClient(name, server.port)));
  // The README's example, once per "machine": each with its own client, sync and quota.
  const machines = connections.map((connection) => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: 20 });
    const quota = new SyncedWindowQuota({ sync, name: 'api', seed: 7, limit: 10, windowMs: 3_600_000 });
    const app = express();
    app.use(rateLimit({ quota, key: () => 'client' }));
    app.get('/', (_req, res) => void res.send('ok'));
    return { sync, http: createServer(app) };
  });
  try {
    const ports = await Promise.all(machines.map((m) => listen(m.http)));
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) {
      statuses.push((await get(ports[i % 2] as number)).status);
      // Slower than the sync period, so each machine sees the other's requests: no overshoot.
      await sleep(60);
    }
    t.deepEqual(statuses, [...Array(10).fill(200), ...Array(10).fill(429)]);
    const last = await get(ports[0] as number);
    t.is(last.status, 429);
    t.regex(String(last.headers.ratelimit), /^"default";r=0;t=\d+$/);
  } finally {
    for (const m of machines) {
      await close(m.http);
      await m.sync.close();
    }
    for (const connection of connections) await connection.close();
    await server.stop();
  }
});

test(
  title('a reply that is not the script’s fails the sync with ERR_KEEPCOUNT_SYNC and changes nothing'),
  async (t) => {
    for (const reply of [[], 'OK', [1, 2, 'i', 1, 1, 5], [1, 2, 'i', 1, 0, 'extra']]) {
      const sync = new RedisSync({ sendCommand: async () => reply, syncMs: 3_600_000 });
      const errors: Error[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      const sketch = new SyncedEstimator({ sync, name: 'bad', seed: 7 });
      sketch.incr('k', 2);
      t.false(await sync.flush());
      t.is(sketch.get('k'), 2);
      t.is(sync.nodes, 1);
      t.like(errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Unexpected reply from the keepcount sync script' });
      await sync.close();
    }
  },
);

test(title('close() called twice resolves both calls once the last sync is done, with its result'), async (t) => {
  const replied: string[] = [];
  const sync = new RedisSync({
    sendCommand: async () => {
      await sleep(50);
      replied.push('reply');
      throw new Error('no connection');
    },
    syncMs: 3_600_000,
  });
  const sketch = new SyncedEstimator({ sync, name: 'close-twice', seed: 7 });
  sketch.incr('k');
  // As two shutdown hooks would: the process may exit once either resolves.
  const [first, second] = await Promise.all([sync.close(), sync.close().then((ok) => [ok, replied.length])]);
  t.false(first);
  t.deepEqual(second, [false, 1]);
});

test(title('a sender that throws synchronously fails the sync, never the caller'), async (t) => {
  const sync = new RedisSync({
    sendCommand: () => {
      throw new Error('no connection');
    },
    syncMs: 3_600_000,
  });
  const sketch = new SyncedEstimator({ sync, name: 'throws', seed: 7 });
  t.is(sketch.incr('k'), 1);
  t.false(await sync.flush());
  t.is(sync.stats.failures, 1);
  await sync.close();
});

test(title('bad options are refused with keepcount error codes'), (t) => {
  throwsShape(t, () => new RedisSync({ sendCommand: 'no' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "sendCommand" option must be of type function. Received type string ("no")',
  });
  throwsShape(t, () => new RedisSync({ sendCommand: async () => [], cluster: 'yes' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "cluster" option must be of type boolean. Received type string ("yes")',
  });
  const sync = new RedisSync({ sendCommand: async () => [] });
  throwsShape(t, () => new SyncedEstimator({ sync, name: 'a{b}', seed: 1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "name" option must be a non-empty string without { or }. Received type string ("a{b}")',
  });
  throwsShape(t, () => new SyncedEstimator({ sync: {} as never, name: 'a', seed: 1 }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "sync" option must be an instance of RedisSync. Received an instance of Object',
  });
  throwsShape(t, () => new SyncedRate({ sync, name: 'a', seed: 1, intervalMs: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "intervalMs" option must be/,
  });
  void sync.close();
});

test(
  title('a second structure of one kind and name on one RedisSync is refused, even once the first is closed'),
  (t) => {
    // Both would push into this node's one contribution in Redis: one's counts would be lost.
    const sync = new RedisSync({ sendCommand: async () => [], syncMs: 3_600_000 });
    const seed = 7;
    const limit = { perSecond: 1, burst: 1 };
    const first = new SyncedEstimator({ sync, name: 'once', seed });
    const again = (kind: string, make: () => unknown) =>
      throwsShape(t, make, {
        instanceOf: Error,
        code: 'ERR_KEEPCOUNT_DUPLICATE_KEY',
        message:
          `A ${kind} named "once" was already made on this RedisSync: its counts in Redis are this node's, ` +
          'and a second one would overwrite them. Share the first, or give the second its own RedisSync',
      });
    again('SyncedEstimator', () => new SyncedEstimator({ sync, name: 'once', seed }));
    first.close();
    again('SyncedEstimator', () => new SyncedEstimator({ sync, name: 'once', seed }));
    // Other kinds of the same name keep keys of their own.
    new SyncedWindowQuota({ sync, name: 'once', seed, limit: 1, windowMs: 1000 }).close();
    again('SyncedRate (or SyncedWindowQuota)', () => new SyncedRate({ sync, name: 'once', seed, intervalMs: 1000 }));
    new SyncedInflight({ sync, name: 'once', seed }).close();
    again('SyncedInflight', () => new SyncedInflight({ sync, name: 'once', seed }));
    new SyncedLimiter({ sync, name: 'once', limit }).close();
    again('SyncedLimiter', () => new SyncedLimiter({ sync, name: 'once', limit }));
    // Another sync is another node, with a contribution of its own.
    const other = new RedisSync({ sendCommand: async () => [], syncMs: 3_600_000 });
    new SyncedEstimator({ sync: other, name: 'once', seed }).close();
    void sync.close();
    void other.close();
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
