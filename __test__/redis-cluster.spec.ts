/**
 * keepcount/redis against a real 3-master Redis Cluster on loopback (started here), through
 * ioredis' `Cluster` and node-redis' `createCluster`.
 */
import test from 'ava';
import {
  RedisSync,
  SyncedEstimator,
  SyncedInflight,
  SyncedLimiter,
  SyncedWindowQuota,
  type SendCommand,
} from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient, connectCluster, type Connection } from './redis-clients.js';
import { startRedisCluster, type RedisCluster } from '../tools/redis-cluster.js';
import { startRedis } from '../tools/redis-server.js';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { sleep, until } from './waits.js';

const run = promisify(execFile);

/** The port of the master that holds the hash tag `{name}`, as `port`'s CLUSTER NODES says. */
async function masterOf(port: number, name: string): Promise<number> {
  const cli = async (...args: string[]) =>
    (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args])).stdout.trim();
  const slot = Number(await cli('CLUSTER', 'KEYSLOT', `{${name}}`));
  for (const line of (await cli('CLUSTER', 'NODES')).split('\n')) {
    const parts = line.split(' ');
    if (!(parts[2] ?? '').includes('master')) continue;
    for (const range of parts.slice(8)) {
      const [lo, hi] = range.split('-').map(Number);
      if (slot >= (lo as number) && slot <= (hi ?? lo)!) return Number(/:(\d+)/.exec(parts[1] ?? '')?.[1]);
    }
  }
  throw new Error(`no master holds {${name}}`);
}

/** Runs `body` on a fresh cluster, stopped afterwards whatever happens. */
async function withCluster(body: (cluster: RedisCluster) => Promise<void>): Promise<void> {
  const cluster = await startRedisCluster();
  try {
    await body(cluster);
  } finally {
    await cluster.stop();
  }
}

test.serial(
  title('3 nodes on both cluster clients, each syncing three structures, reach exact totals on a Redis Cluster'),
  async (t) => {
    await withCluster(async (cluster) => {
      const connections: Connection[] = [];
      try {
        for (const name of ['ioredis', 'redis', 'ioredis'] as const)
          connections.push(await connectCluster(name, cluster.seeds));
        // Three names: three hash tags, which a 3-master cluster may well place on different masters.
        const nodes = connections.map((connection) => {
          const sync = new RedisSync({
            sendCommand: connection.send,
            syncMs: 3_600_000,
            timeoutMs: 30_000,
            cluster: true,
          });
          const errors: Error[] = [];
          sync.on('error', (error: Error) => errors.push(error));
          const sketch = new SyncedEstimator({ sync, name: 'hits', seed: 7 });
          const quota = new SyncedWindowQuota({
            sync,
            name: 'api',
            seed: 7,
            limit: 1000,
            windowMs: 86_400_000,
            clock: { now: () => 43_200_000 },
          });
          // A third name, with exact counts synced beside its sketch.
          const exact = new SyncedWindowQuota({
            sync,
            name: 'exact',
            seed: 7,
            limit: 1000,
            windowMs: 86_400_000,
            clock: { now: () => 43_200_000 },
            heavyHitters: { threshold: 1 },
          });
          return { sync, sketch, quota, exact, errors };
        });
        for (let round = 0; round < 3; round++) {
          nodes.forEach(({ sketch, quota, exact }, n) => {
            for (let i = 0; i < 10; i++) sketch.incr(`k${i}`, n + 1);
            for (let i = 0; i < 100; i++) quota.consume('client');
            for (let i = 0; i < 50; i++) exact.consume('client');
          });
          for (const { sync } of nodes) t.true(await sync.flush());
        }
        // Each node has synced after every node's last push: the second pass pulls the last pushes.
        for (const { sync } of nodes) t.true(await sync.flush());
        for (const { sketch, quota, exact, errors, sync } of nodes) {
          t.deepEqual(errors, []);
          // 3 rounds × (1 + 2 + 3); 10 keys in a 4 × 8192 sketch with a fixed seed share no counters.
          t.deepEqual(
            Array.from({ length: 10 }, (_, i) => sketch.get(`k${i}`)),
            Array(10).fill(18),
          );
          t.is(quota.current('client').count, 900);
          t.deepEqual(exact.topTalkers(1), [{ key: 'client', lower: 450, upper: 450 }], 'counted exactly, fleet-wide');
          t.is(sync.nodes, 3);
        }
        for (const { sync } of nodes) await sync.close();
      } finally {
        for (const connection of connections) await connection.close();
      }
    });
  },
);

test.serial(
  title('in-flight leases and token-bucket loans work on a Redis Cluster beside a sketch, one call per name'),
  async (t) => {
    await withCluster(async (cluster) => {
      const connections: Connection[] = [];
      try {
        for (const name of ['ioredis', 'redis'] as const) connections.push(await connectCluster(name, cluster.seeds));
        const started = performance.now();
        const nodes = connections.map((connection) => {
          const sync = new RedisSync({
            sendCommand: connection.send,
            syncMs: 3_600_000,
            timeoutMs: 30_000,
            cluster: true,
          });
          const errors: Error[] = [];
          sync.on('error', (error: Error) => errors.push(error));
          const inflight = new SyncedInflight({ sync, name: 'calls', seed: 7 });
          const limiter = new SyncedLimiter({ sync, name: 'uploads', limit: { perSecond: 10, burst: 10 } });
          const sketch = new SyncedEstimator({ sync, name: 'hits', seed: 7 });
          return { sync, inflight, limiter, sketch, errors };
        });
        // Every node syncs once (so it knows the node count and may borrow), then holds slots,
        // counts and checks, and syncs twice more so each pulls the other's last push.
        for (const { sync } of nodes) t.true(await sync.flush());
        let admitted = 0;
        nodes.forEach(({ inflight, limiter, sketch }, n) => {
          for (let i = 0; i <= n; i++) inflight.enter('upstream');
          sketch.incr('k', n + 1);
          for (let i = 0; i < 20; i++) if (limiter.check('client').allowed) admitted++;
        });
        for (let pass = 0; pass < 2; pass++) for (const { sync } of nodes) t.true(await sync.flush());
        for (let pass = 0; pass < 2; pass++) {
          for (const { limiter } of nodes) for (let i = 0; i < 20; i++) if (limiter.check('client').allowed) admitted++;
          for (const { sync } of nodes) t.true(await sync.flush());
        }
        const elapsedS = (performance.now() - started) / 1000;
        for (const { inflight, sketch, errors, sync } of nodes) {
          t.deepEqual(errors, []);
          t.is(inflight.get('upstream'), 3, 'one slot on the first node, two on the second');
          t.is(sketch.get('k'), 3);
          t.is(sync.nodes, 2);
        }
        // Loans arrived (checks after the first syncs were admitted), and the two nodes together
        // never took more than the bucket had to give: its burst, what it refilled, and each
        // node's credit of burst / nodes before its first loan.
        t.true(admitted > 0, `admitted ${admitted}`);
        t.true(admitted <= 10 + 10 + Math.ceil(10 * elapsedS), `admitted ${admitted} in ${elapsedS.toFixed(2)} s`);
        for (const { inflight } of nodes) inflight.leave('upstream');
        for (const { sync } of nodes) await sync.close();
      } finally {
        for (const connection of connections) await connection.close();
      }
    });
  },
);

test.serial(
  title('without cluster: true a sync carrying two names fails with CROSSSLOT; with it the same sync succeeds'),
  async (t) => {
    await withCluster(async (cluster) => {
      const connection = await connectCluster('ioredis', cluster.seeds);
      try {
        // Names whose hash tags fall in different slots (CRC16 of "a" and "b").
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000, timeoutMs: 30_000 });
        const errors: Error[] = [];
        sync.on('error', (error: Error) => errors.push(error));
        const a = new SyncedEstimator({ sync, name: 'a', seed: 7 });
        new SyncedEstimator({ sync, name: 'b', seed: 7 });
        a.incr('k', 5);
        t.false(await sync.flush());
        t.regex(String(errors[0]?.message), /CROSSSLOT/);
        await sync.close();
        // With one call per name the same two structures sync, and another node reads the count.
        const fixed = new RedisSync({
          sendCommand: connection.send,
          syncMs: 3_600_000,
          timeoutMs: 30_000,
          cluster: true,
        });
        const again = new SyncedEstimator({ sync: fixed, name: 'a', seed: 7 });
        new SyncedEstimator({ sync: fixed, name: 'b', seed: 7 });
        again.incr('k', 5);
        t.true(await fixed.flush());
        const reader = new RedisSync({
          sendCommand: connection.send,
          syncMs: 3_600_000,
          timeoutMs: 30_000,
          cluster: true,
        });
        const read = new SyncedEstimator({ sync: reader, name: 'a', seed: 7 });
        t.true(await reader.flush());
        t.is(read.get('k'), 5);
        await fixed.close();
        await reader.close();
      } finally {
        await connection.close();
      }
    });
  },
);

test.serial(
  title('cluster: true, one name’s call failing: the others apply, its counts go with the next sync'),
  async (t) => {
    // A standalone server takes per-name calls too; the sender fails every call for {b} while told to.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      let failB = true;
      const send: SendCommand = (args) =>
        failB && args.some((arg) => arg.includes('{b}'))
          ? Promise.reject(new Error('b is down'))
          : connection.send(args);
      const sync = new RedisSync({ sendCommand: send, syncMs: 3_600_000, timeoutMs: 30_000, cluster: true });
      const errors: Error[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      const a = new SyncedEstimator({ sync, name: 'a', seed: 7 });
      const b = new SyncedEstimator({ sync, name: 'b', seed: 7 });
      a.incr('k', 2);
      b.incr('k', 3);
      t.false(await sync.flush());
      // The client's rejection, wrapped in a coded error that names the structure.
      t.deepEqual(
        errors.map((e) => [(e as { code?: string }).code, e.message, (e as { names?: string[] }).names]),
        [['ERR_KEEPCOUNT_SYNC', 'Redis sync of "b" failed: b is down', ['b']]],
      );
      t.is((errors[0]?.cause as Error).message, 'b is down');
      t.is(sync.stats.failures, 1);
      const reader = new RedisSync({
        sendCommand: connection.send,
        syncMs: 3_600_000,
        timeoutMs: 30_000,
        cluster: true,
      });
      const readA = new SyncedEstimator({ sync: reader, name: 'a', seed: 7 });
      const readB = new SyncedEstimator({ sync: reader, name: 'b', seed: 7 });
      t.true(await reader.flush());
      t.deepEqual([readA.get('k'), readB.get('k')], [2, 0], "a's call applied, b's did not");
      failB = false;
      t.true(await sync.flush());
      t.true(await reader.flush());
      t.deepEqual([readA.get('k'), readB.get('k')], [2, 3], "b's counts went with the next sync, a's not twice");
      await sync.close();
      await reader.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('cluster: true, a name failing for long: a quota made then on a healthy name starts fresh'),
  async (t) => {
    // The last sync that carried every name is as old as the outage; a structure made then on a
    // healthy name started out stale, and a 'closed' quota refused until its first call.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const send: SendCommand = (args) =>
        args.some((arg) => arg.includes('{down}')) ? Promise.reject(new Error('down')) : connection.send(args);
      const sync = new RedisSync({ sendCommand: send, syncMs: 3_600_000, staleAfterMs: 300, cluster: true });
      sync.on('error', () => {});
      const quota = (name: string) =>
        new SyncedWindowQuota({ sync, name, seed: 7, limit: 10, windowMs: 3_600_000, failPolicy: 'closed' });
      const down = quota('down');
      const up = quota('up');
      const deadline = performance.now() + 600;
      while (performance.now() < deadline) {
        await sync.flush();
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // A call of the healthy name just now, however late the loop's last one was.
      await sync.flush();
      t.true(sync.stale, "the stalest structure's staleness");
      t.deepEqual([down.consume('k').allowed, up.consume('k').allowed], [false, true]);
      t.true(quota('later').consume('k').allowed, 'made now, on a healthy name: fresh');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a sender rejecting with a value that has no string form: the sync fails, flush() resolves'),
  async (t) => {
    // Reporting the failure called String() on it, which threw: flush() rejected, and from the
    // timer that was an unhandled rejection ending the process.
    const reason = Object.create(null) as object;
    for (const cluster of [false, true]) {
      const sync = new RedisSync({ sendCommand: () => Promise.reject(reason), syncMs: 3_600_000, cluster });
      const errors: Error[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      new SyncedEstimator({ sync, name: 'x', seed: 7 }).incr('k');
      t.false(await sync.flush());
      t.like(errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Redis sync of "x" failed: [object Object]' });
      t.is(errors[0]?.cause, reason);
      await sync.close();
    }
  },
);

test.serial(
  title('one master stopped (SIGSTOP): quotas on the others stay fresh and admit, only its names go stale'),
  async (t) => {
    await withCluster(async (cluster) => {
      const paused = cluster.nodes[0]!;
      const candidates = Array.from({ length: 40 }, (_, i) => `q${i}`);
      const masters = await Promise.all(candidates.map((name) => masterOf(paused.port, name)));
      const stopped = candidates.find((_, i) => masters[i] === paused.port)!;
      const healthy = candidates.find((_, i) => masters[i] !== paused.port)!;
      const connections: Connection[] = [];
      try {
        for (let n = 0; n < 2; n++) connections.push(await connectCluster('ioredis', cluster.seeds));
        const nodes = connections.map((connection) => {
          // A hung call gives up only after 2 s; a structure is stale after 500 ms without a sync.
          const sync = new RedisSync({
            sendCommand: connection.send,
            syncMs: 50,
            timeoutMs: 2000,
            staleAfterMs: 500,
            cluster: true,
          });
          const errors: Error[] = [];
          sync.on('error', (error: Error) => errors.push(error));
          const quota = (name: string) =>
            new SyncedWindowQuota({
              sync,
              name,
              seed: 7,
              limit: 1_000_000,
              windowMs: 86_400_000,
              clock: { now: () => 43_200_000 },
              failPolicy: 'closed',
            });
          return { sync, errors, healthy: quota(healthy), stopped: quota(stopped) };
        });
        for (const { sync } of nodes) await sync.ready();
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        let consumed = { healthy: 0, stopped: 0 };
        a.healthy.consume('client');
        a.stopped.consume('client');
        consumed = { healthy: 1, stopped: 1 };
        await until(() => b.healthy.current('client').count === 1, 'b sees a first count');
        paused.pause();
        try {
          await sleep(800);
          // Past staleAfterMs: the stopped master's quota is stale and refuses, the other admits.
          t.true(a.sync.stale, 'the sync is as stale as its stalest structure');
          t.true(a.sync.staleness > 500);
          t.false(a.stopped.consume('client').allowed, "the stopped master's quota refuses");
          consumed.stopped++;
          for (let probe = 0; probe < 4; probe++) {
            t.true(a.healthy.consume('client').allowed, `probe ${probe}: the healthy master's quota admits`);
            consumed.healthy++;
            const sent = performance.now();
            await until(() => b.healthy.current('client').count === consumed.healthy, 'b sees the count', 5000);
            const late = performance.now() - sent;
            // Counts on a healthy master reach the other node within a few syncs, not a timeout.
            t.true(late < 1000, `probe ${probe}: seen ${Math.round(late)} ms after`);
            t.true(b.healthy.consume('client').allowed, `probe ${probe}: b admits on the healthy quota`);
            consumed.healthy++;
            await sleep(200);
          }
          t.false(b.stopped.consume('client').allowed);
          consumed.stopped++;
          // Each node's call to the stopped master times out (after 2 s), naming its structure.
          await until(() => nodes.every((node) => node.errors.length > 0), 'the calls time out', 5000);
          t.true(a.healthy.consume('client').allowed, 'still admitting once the hung call timed out');
          consumed.healthy++;
        } finally {
          paused.resume();
        }
        // Back: every count of both quotas reaches every node, once.
        await until(async () => {
          for (const { sync } of nodes) await sync.flush();
          return nodes.every(
            (node) =>
              node.healthy.current('client').count === consumed.healthy &&
              node.stopped.current('client').count === consumed.stopped,
          );
        }, 'exact totals on every node after SIGCONT');
        for (const node of nodes) {
          t.false(node.sync.stale);
          t.true(node.healthy.consume('client').allowed && node.stopped.consume('client').allowed);
          t.log(node.errors.map((error) => error.message));
          for (const error of node.errors) {
            t.like(error, { code: 'ERR_KEEPCOUNT_SYNC', names: [stopped] });
            t.true(error.message.includes(`"${stopped}"`), error.message);
            if (!/timed out/.test(error.message)) t.truthy(error.cause);
          }
        }
        for (const { sync } of nodes) t.true(await sync.close());
      } finally {
        for (const connection of connections) await connection.close();
      }
    });
  },
);

test.serial(
  title('a slot half migrated holds its name’s syncs: none applies there, and after the move each counts once'),
  async (t) => {
    await withCluster(async (cluster) => {
      const cli = async (port: number, ...args: string[]) =>
        (await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args])).stdout.trim();
      const name = 'moving';
      const from = await masterOf(cluster.nodes[0]!.port, name);
      const to = cluster.nodes.find((node) => node.port !== from)!.port;
      const slot = await cli(from, 'CLUSTER', 'KEYSLOT', `{${name}}`);
      const connections = [
        await connectCluster('ioredis', cluster.seeds),
        await connectCluster('ioredis', cluster.seeds),
      ];
      try {
        const [a, b] = connections.map((connection) => {
          const sync = new RedisSync({
            sendCommand: connection.send,
            syncMs: 3_600_000,
            timeoutMs: 1_000,
            cluster: true,
          });
          sync.on('error', () => undefined);
          return { sync, sketch: new SyncedEstimator({ sync, name, seed: 7 }) };
        }) as [{ sync: RedisSync; sketch: SyncedEstimator }, { sync: RedisSync; sketch: SyncedEstimator }];
        a.sketch.incr('k', 5);
        for (let round = 0; round < 2; round++) for (const { sync } of [a, b]) t.true(await sync.flush());
        t.is(b.sketch.get('k'), 5);
        // Migrating: the key holding a's own contribution moves first, the others stay.
        const [fromId, toId] = [await cli(from, 'CLUSTER', 'MYID'), await cli(to, 'CLUSTER', 'MYID')];
        await cli(to, 'CLUSTER', 'SETSLOT', slot, 'IMPORTING', fromId);
        await cli(from, 'CLUSTER', 'SETSLOT', slot, 'MIGRATING', toId);
        const keys = (await cli(from, 'CLUSTER', 'GETKEYSINSLOT', slot, '1000')).split('\n');
        const own = keys.find((key) => key.endsWith(`:n:${a.sync.nodeId}`))!;
        const migrate = (key: string) => cli(from, 'MIGRATE', '127.0.0.1', String(to), key, '0', '5000');
        await migrate(own);
        a.sketch.incr('k', 2);
        // Redis refuses a's script its moved contribution either way. b's is the check: with a
        // base key that existed, b's script would run on the source (a review saw it succeed),
        // and one meeting a moved key would take it for corrupt and delete the keys left there.
        t.false(await a.sync.flush(), 'no sync applies on a slot half moved');
        t.false(await b.sync.flush(), "nor one whose node's own keys are all still there");
        t.is(b.sketch.get('k'), 5);
        t.is(
          Number(await cli(from, 'CLUSTER', 'COUNTKEYSINSLOT', slot)),
          keys.length - 1,
          'every key not moved is still on the source',
        );
        for (const key of keys) if (key !== own) await migrate(key);
        for (const node of cluster.nodes) await cli(node.port, 'CLUSTER', 'SETSLOT', slot, 'NODE', toId);
        await until(async () => (await a.sync.flush()) && (await b.sync.flush()), 'the syncs go on', 10_000);
        t.true(await b.sync.flush());
        t.deepEqual([a.sketch.get('k'), b.sketch.get('k')], [7, 7], 'counted once');
        await Promise.all([a.sync.close(), b.sync.close()]);
      } finally {
        await Promise.all(connections.map((connection) => connection.close()));
      }
    });
  },
);
