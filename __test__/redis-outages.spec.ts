/**
 * keepcount/redis when Redis fails, against real redis-server processes (started here, on
 * loopback) and real node processes, with both client libraries: stopped, killed, restarted
 * without its data, rolled back to an older snapshot, or missing some keys, the fleet's counts
 * come back exact; while stale, checks keep answering under their fail policy.
 */
import test from 'ava';
import { ManualClock } from '../lib/clock.js';
import { sketchLayout } from '../lib/redis/hasher.js';
import { RedisSync, SyncedEstimator, SyncedWindowQuota, type SendCommand } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { clientNames, connectClient } from './redis-clients.js';
import { countNodes, readTotals, waitForNodes } from './redis-nodes.js';
import { sleep, until } from './waits.js';
import { startRedis } from '../tools/redis-server.js';

for (const client of clientNames) {
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
      // So this asks it of one node of three: it fails only if all three ran no timer for the
      // 1,500 ms stop less their 500 ms timeout. Odds not computed; far below the other timed
      // checks', as it needs three processes stalled for a second at once.
      t.true(
        results.some((r) => r.errors > 0),
        'the nodes saw their syncs time out',
      );
      t.deepEqual(await readTotals(server, client, 'stop'), {
        sketch: Array(10).fill(900),
        exact: Array(10).fill(900),
      });
    } finally {
      await server.stop();
    }
  });
}

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
    t.deepEqual(await readTotals(server, 'redis', 'restart'), {
      sketch: Array(10).fill(900),
      exact: Array(10).fill(900),
    });
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
    t.deepEqual(await readTotals(server, 'ioredis', 'rebuild'), {
      sketch: Array(10).fill(900),
      exact: Array(10).fill(900),
    });
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
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, timeoutMs: 30_000 });
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
      t.deepEqual((await readTotals(server, 'ioredis', 'rollback')).sketch, [9, 2, 4, 1, ...Array(6).fill(0)]);
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

/**
 * Nodes `a` and `b` of a quota of 100 a window, syncing by hand, on a clock that stands still (no
 * window ends mid-test); `b`'s sends fail while `setReconnecting(true)` holds (its client
 * reconnecting after a Redis restart, retrying with backoff), `a`'s go through.
 */
function reconnectingPair(send: SendCommand, name: string, heavyHitters: boolean) {
  const clock = new ManualClock(Date.now());
  const node = (sendCommand: SendCommand) => {
    const sync = new RedisSync({ sendCommand, syncMs: 3_600_000 });
    const quota = new SyncedWindowQuota({
      sync,
      name,
      seed: 7,
      limit: 100,
      windowMs: 3_600_000,
      failPolicy: 'closed',
      heavyHitters,
      clock,
    });
    return { sync, quota };
  };
  let reconnecting = false;
  const b = node((args) => (reconnecting ? Promise.reject(new Error('reconnecting')) : send(args)));
  const setReconnecting = (on: boolean): void => {
    reconnecting = on;
  };
  return { a: node(send), b, setReconnecting };
}

/** How many of `n` requests for `key` `quota` admits. */
const admitted = (quota: SyncedWindowQuota, n: number, key = 'victim'): number =>
  Array.from({ length: n }, () => quota.consume(key).allowed).filter(Boolean).length;

for (const heavyHitters of [false, true]) {
  const variant = heavyHitters ? ', heavy hitters too' : '';
  test.serial(
    title(`a restart that loses the data: the node back first decides on the others’ counts it knew${variant}`),
    async (t) => {
      // Before, a node that saw the new incarnation zeroed the others' counts and was not stale:
      // until the others pushed theirs again (two of their syncs, seconds while a client
      // reconnects) it admitted a client up to the limit again on its own counts, 200 in a window
      // of 100. Syncs by hand on a clock that stands still: deterministic, no false failure.
      const server = await startRedis();
      const connection = await connectClient('ioredis', server.port);
      const { a, b, setReconnecting } = reconnectingPair(
        connection.send,
        heavyHitters ? 'gap-hh' : 'gap',
        heavyHitters,
      );
      try {
        await knowEachOther([a, b]);
        t.is(admitted(b.quota, 100), 100);
        await until(() => b.sync.flush(), 'b pushes');
        await until(() => a.sync.flush(), 'a pulls');
        // With heavy hitters, b counts the client exactly from its 7th request (the threshold).
        const known = heavyHitters ? 94 : 100;
        t.is(a.quota.current('victim').count, known);
        setReconnecting(true);
        await server.restart();
        // a sees the new incarnation, then pushes its own counts again; b's sends fail.
        await until(() => a.sync.flush(), 'a syncs after the restart');
        await until(() => a.sync.flush(), 'a syncs again');
        t.false(await b.sync.flush());
        t.false(a.sync.stale);
        // README's bound, with no request between syncs: the limit, and with heavy hitters the
        // `threshold − 1` = 6 requests b saw before counting the client exactly.
        t.is(admitted(a.quota, 100), heavyHitters ? 6 : 0);
        setReconnecting(false);
        // b sees the new incarnation, then pushes its whole count again; a pulls it.
        for (let round = 0; round < 2; round++) {
          for (const [i, { sync }] of [b, a].entries()) await until(() => sync.flush(), `node ${i} syncs`);
        }
        // Refused requests count too: b's and a's 100 each, b's re-push covering the floor, not
        // added to it.
        const count = known + 100;
        t.deepEqual([a.quota.current('victim').count, b.quota.current('victim').count], [count, count]);
      } finally {
        for (const node of [a, b]) await node.sync.close();
        await connection.close();
        await server.stop();
      }
    },
  );
}

test.serial(
  title('a restart from an older snapshot: the node back first decides on the newer counts it knew'),
  async (t) => {
    // Before, the snapshot's 50 read as b's count until b pushed its 100 again: a admitted 50 more.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const { a, b, setReconnecting } = reconnectingPair(connection.send, 'older', false);
    try {
      await knowEachOther([a, b]);
      for (let half = 0; half < 2; half++) {
        t.is(admitted(b.quota, 50), 50);
        await until(() => b.sync.flush(), 'b pushes');
        await until(() => a.sync.flush(), 'a pulls');
        if (half === 0) await connection.send(['SAVE']);
      }
      t.is(a.quota.current('victim').count, 100);
      setReconnecting(true);
      await server.restart();
      await until(() => a.sync.flush(), 'a syncs after the restart');
      await until(() => a.sync.flush(), 'a syncs again');
      t.is(admitted(a.quota, 100), 0);
      setReconnecting(false);
      for (let round = 0; round < 2; round++) {
        for (const [i, { sync }] of [b, a].entries()) await until(() => sync.flush(), `node ${i} syncs`);
      }
      t.deepEqual([a.quota.current('victim').count, b.quota.current('victim').count], [200, 200]);
    } finally {
      for (const node of [a, b]) await node.sync.close();
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
          const sync = new RedisSync({
            sendCommand: connection.send,
            syncMs: 3_600_000,
            timeoutMs: 30_000,
            nodeId: `${name}-${nodeId}`,
          });
          return { sync, sketch: new SyncedEstimator({ sync, name, seed: 7 }) };
        });
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        const flushBoth = async () => t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true], lost);
        a.sketch.incr('k0', 5);
        b.sketch.incr('k0', 1);
        await flushBoth();
        const key = lost.startsWith('n:') ? `n:${name}-${lost.slice(2)}` : lost;
        t.is(await connection.send(['DEL', `keepcount:{${name}}:e:${sketchLayout(4, 8192, 7n)}:${key}`]), 1, lost);
        a.sketch.incr('k0', 3);
        b.sketch.incr('k1', 2);
        for (let i = 0; i < 3; i++) await flushBoth();
        t.deepEqual((await readTotals(server, 'ioredis', name)).sketch, [9, 2, ...Array(8).fill(0)], lost);
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
      // A 300 ms timeout can catch a healthy sync on this loaded machine: wait for one to succeed.
      await until(() => sync.flush(), 'a sync succeeds before Redis is stopped');
      t.false(sync.stale);
      t.true(closed.consume('k').allowed);
      server.pause();
      // The timer's syncs time out (300 ms) and staleness passes 400 ms, however late both timers fire.
      await until(() => sync.stale && errors.length > 0, 'the sync goes stale and reports a timeout');
      t.true(sync.stale);
      t.true(sync.staleness >= 400);
      t.true(errors.length > 0);
      t.like(errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Redis sync timed out after 300 ms' });
      t.like(closed.consume('k'), { allowed: false, remaining: 0 }, "'closed' refuses while stale, with nothing left");
      t.true(open.consume('k').allowed, "'open' decides on the last known count");
      // One node known: its share is the whole limit.
      const admitted = Array.from({ length: 12 }, () => local.consume('k').allowed).filter(Boolean).length;
      t.is(admitted, 10);
      server.resume();
      await until(() => !sync.stale, 'the sync is fresh again after SIGCONT');
      t.false(sync.stale);
      t.true(closed.consume('k').allowed, 'fresh again');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

/**
 * Three nodes, each its own sync (no timer: syncs by hand; short timeouts, for the syncs Redis
 * never answers once paused; stale 150 ms after the last success) with a quota `name` of `limit`.
 */
function quotaNodes(send: SendCommand, name: string, limit: number) {
  return Array.from({ length: 3 }, () => {
    const sync = new RedisSync({ sendCommand: send, syncMs: 3_600_000, timeoutMs: 100, staleAfterMs: 150 });
    const quota = new SyncedWindowQuota({ sync, name, seed: 7, limit, windowMs: 3_600_000, failPolicy: 'local' });
    return { sync, quota };
  });
}

/**
 * Two rounds of syncs, so each node's last sync follows the other two's first: each knows all
 * three. A 100 ms timeout can catch a healthy sync on a loaded machine: each waits for one to succeed.
 */
async function knowEachOther(nodes: { sync: RedisSync }[]): Promise<void> {
  for (let round = 0; round < 2; round++) {
    for (const [i, { sync }] of nodes.entries()) await until(() => sync.flush(), `node ${i} syncs`);
  }
}

test.serial(
  title("'local' fail policy: each stale node admits its share of the limit, by the last node count"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const nodes = quotaNodes(connection.send, 'share', 10);
      await knowEachOther(nodes);
      t.deepEqual(
        nodes.map(({ sync }) => sync.nodes),
        [3, 3, 3],
      );
      server.pause();
      for (const { sync } of nodes) t.false(await sync.flush());
      // Staleness passes 150 ms since each node's last success, however late the timers fire.
      await until(() => nodes.every(({ sync }) => sync.stale), 'every node goes stale');
      t.true(nodes.every(({ sync }) => sync.stale));
      // floor(10 / 3) = 3 each: 9 admitted fleet-wide, within the limit, with no sync at all; what
      // is left (the headers' `r`) counts down the node's share, and is 0 by its first refusal.
      const decisions = nodes.map(({ quota }) => Array.from({ length: 5 }, () => quota.consume('k')));
      t.deepEqual(
        decisions.map((ds) => ds.filter((d) => d.allowed).length),
        [3, 3, 3],
      );
      t.deepEqual(
        decisions.map((ds) => ds.map((d) => d.remaining)),
        Array.from({ length: 3 }, () => [2, 1, 0, 0, 0]),
      );
      server.resume();
      for (const { sync } of nodes) await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("'local' fail policy: a quota made after the sync's last one closed divides by the nodes it knew"),
  async (t) => {
    // sync.nodes is what a structure divides its limit by until its first sync; it fell back to 1
    // once the sync's only structure was closed, and a quota made next while Redis was away took
    // the whole limit for its share.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const nodes = quotaNodes(connection.send, 'first', 30);
      await knowEachOther(nodes);
      const [{ sync, quota }] = nodes as [(typeof nodes)[0]];
      t.is(sync.nodes, 3);
      quota.close();
      // Pushed, then dropped: the sync has no structure left.
      await until(() => sync.flush(), 'the closed quota is pushed');
      await sync.flush();
      t.is(sync.nodes, 3, 'the nodes it knew');
      server.pause();
      const later = new SyncedWindowQuota({ sync, name: 'later', seed: 7, limit: 30, windowMs: 3_600_000 });
      t.false(await sync.flush());
      await until(() => sync.stale, 'the sync goes stale');
      const admitted = Array.from({ length: 15 }, () => later.consume('k').allowed).filter(Boolean).length;
      t.is(admitted, 10, 'floor(30 / 3)');
      server.resume();
      for (const node of nodes) await node.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("'local' fail policy: nodes whose sync never reached Redis refuse once stale, not a whole limit each"),
  async (t) => {
    // A node booted while Redis is away knows no node count but its own: each took the whole limit
    // for its share, and three such nodes admitted 30 of a limit of 10 per key, window after window.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      server.pause();
      const nodes = quotaNodes(connection.send, 'unsynced', 10);
      for (const { sync } of nodes) t.false(await sync.flush());
      await until(() => nodes.every(({ sync }) => sync.stale), 'every node goes stale');
      t.deepEqual(
        nodes.map(({ sync }) => sync.synced),
        [false, false, false],
      );
      const admitted = nodes.map(
        ({ quota }) => Array.from({ length: 12 }, () => quota.consume('k').allowed).filter(Boolean).length,
      );
      t.deepEqual(admitted, [0, 0, 0]);
      server.resume();
      // Once its sync has reached Redis, a node decides on the fleet's counts again.
      for (const [i, { sync }] of nodes.entries()) await until(() => sync.flush(), `node ${i} syncs`);
      t.true(nodes.every(({ quota }) => quota.consume('fresh').allowed));
      for (const { sync } of nodes) await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
