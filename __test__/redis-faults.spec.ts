/**
 * keepcount/redis under the faults a shared Redis meets, on a real redis-server: keys overwritten
 * with another Redis type, an in-flight lease set lost to eviction (maxmemory allkeys-lru), DEL or
 * FLUSHALL while a node is dead, Redis stopped with SIGSTOP for longer than a lease while HTTP
 * requests keep coming, and a restart without persistence under in-flight slots.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import test from 'ava';
import { rateLimit, tokenBucket, upstreamLimit } from '../lib/http/index.js';
import { sketchLayout } from '../lib/redis/hasher.js';
import { RedisSync, SyncedEstimator, SyncedInflight, SyncedLimiter, SyncedWindowQuota } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { close, get, listen } from './http-client.js';
import { clientNames, connectClient, type Connection } from './redis-clients.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A sync whose timer never fires within a test: the spec flushes by hand, in an order it chooses. */
const BY_HAND = 60_000;

/** Errors a sync emitted, kept in order. */
function errorsOf(sync: RedisSync): Error[] {
  const errors: Error[] = [];
  sync.on('error', (error: Error) => errors.push(error));
  return errors;
}

/** What `command` writes over `key` with a type keepcount never uses there. */
const overwrites = [
  (key: string) => ['SET', key, 'not keepcount'],
  (key: string) => ['LPUSH', key, 'not', 'keepcount'],
  (key: string) => ['SADD', key, 'not keepcount'],
];
const typeOf = ['string', 'list', 'set'];

/** Resolves once `done()` holds, polling; rejects after `ms`. */
async function until(done: () => boolean | Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await done())) {
    if (performance.now() > deadline) throw new Error(`never: ${what}`);
    await sleep(10);
  }
}

/** The fleet-wide in-flight count of `keys` as a fresh node reads it from Redis after two syncs. */
async function readInflight(connection: Connection, name: string, keys: string[]): Promise<number[]> {
  const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
  const reader = new SyncedInflight({ sync, name, seed: 7, leaseMs: 3_600_000 });
  const ok = (await sync.flush()) && (await sync.flush());
  reader.close();
  await sync.close();
  if (!ok) throw new Error('the reader could not sync');
  return keys.map((key) => reader.get(key));
}

/**
 * The Redis key of a part of structure `name` (`e:c`, `i:n:a`, `e:nodes`, `e:layouts`, ...), a
 * sketch's entries laid out as the default 4 × 8192 sketch with seed 7 that every structure here
 * uses (its node and layout registries are one for all layouts).
 */
const keyOf = (name: string, suffix: string): string =>
  `keepcount:{${name}}:${suffix.replace(/^([ei]):(?!(?:layouts|nodes)$)/, `$1:${sketchLayout(4, 8192, 7n)}:`)}`;

test.serial(
  title('a sketch key overwritten with another Redis type is deleted, reported once by name, and rebuilt'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // Every key of a sketch entry, the structure's node registry and its layout registry.
      const lost = ['e:c', 'e:v', 'e:m', 'e:n:a', 'e:n:b', 'e:nodes', 'e:layouts'];
      for (const [k, suffix] of lost.entries()) {
        const name = `foreign-${k}`;
        const nodes = ['a', 'b'].map((id) => {
          const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, nodeId: id });
          const errors = errorsOf(sync);
          // A bystander on the same sync: before, one foreign key failed every structure's sync.
          const bystander = new SyncedEstimator({ sync, name: `${name}-bystander`, seed: 7 });
          return { sync, errors, bystander, sketch: new SyncedEstimator({ sync, name, seed: 7 }) };
        });
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        const flushBoth = async () => t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true], suffix);
        a.sketch.incr('k0', 5);
        b.sketch.incr('k0', 1);
        await flushBoth();
        const key = keyOf(name, suffix);
        const overwrite = overwrites[k % overwrites.length] as (key: string) => string[];
        await connection.send(['DEL', key]);
        await connection.send(overwrite(key));
        a.sketch.incr('k0', 3);
        b.sketch.incr('k1', 2);
        a.bystander.incr('x', 4);
        for (let i = 0; i < 3; i++) await flushBoth();
        t.deepEqual(
          nodes.map((node) => [node.sketch.get('k0'), node.sketch.get('k1'), node.bystander.get('x')]),
          [
            [9, 2, 4],
            [9, 2, 4],
          ],
          suffix,
        );
        // The first sync after the overwrite found it and deleted it: one report in all.
        const reported = [...a.errors, ...b.errors];
        t.is(reported.length, 1, suffix);
        t.like(reported[0], {
          code: 'ERR_KEEPCOUNT_FOREIGN_KEY',
          key,
          message:
            `Redis key "${key}" held a ${typeOf[k % typeOf.length]}, which keepcount never writes there: ` +
            'something else writes under the "keepcount" prefix. keepcount deleted the key and rebuilt what it held',
        });
        t.is(Number(await connection.send(['EXISTS', key])), 1, `${suffix} is keepcount's again`);
        for (const node of nodes) await node.sync.close();
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('in-flight and token-bucket keys overwritten with another type are deleted, reported, and recovered'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // SyncedInflight: its lease set, a node's contribution, the global counts.
      for (const [k, suffix] of ['i:l', 'i:n:a', 'i:n:b', 'i:c'].entries()) {
        const name = `foreign-inflight-${k}`;
        const nodes = ['a', 'b'].map((id) => {
          const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, nodeId: id });
          const errors = errorsOf(sync);
          return { sync, errors, inflight: new SyncedInflight({ sync, name, seed: 7, leaseMs: 3_600_000 }) };
        });
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        const flushBoth = async () => t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true], suffix);
        a.inflight.enter('up', 2);
        b.inflight.enter('up', 3);
        await flushBoth();
        const key = keyOf(name, suffix);
        await connection.send(['DEL', key]);
        await connection.send((overwrites[k % overwrites.length] as (key: string) => string[])(key));
        a.inflight.enter('up', 1);
        for (let i = 0; i < 3; i++) await flushBoth();
        t.deepEqual(
          nodes.map((node) => node.inflight.get('up')),
          [6, 6],
          suffix,
        );
        t.deepEqual(await readInflight(connection, name, ['up']), [6], `${suffix}: nothing counted twice`);
        const reported = [...a.errors, ...b.errors];
        t.is(reported.length, 1, suffix);
        t.like(reported[0], { code: 'ERR_KEEPCOUNT_FOREIGN_KEY', key }, suffix);
        for (const node of nodes) await node.sync.close();
      }

      // SyncedLimiter: a key's bucket. 10 tokens that never refill; the bucket starts over full.
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
      const errors = errorsOf(sync);
      const limiter = new SyncedLimiter({
        sync,
        name: 'foreign-bucket',
        limit: { ...HOURLY, burst: 10 },
        creditAfterMs: 0,
      });
      t.true(await sync.flush());
      for (let i = 0; i < 10; i++) limiter.check('k');
      t.true(await sync.flush());
      t.true(await sync.flush());
      t.false(limiter.check('k').allowed, 'the 10 tokens are spent');
      const bucket = 'keepcount:{foreign-bucket}:b:k';
      await connection.send(['DEL', bucket]);
      await connection.send(['SET', bucket, 'not keepcount']);
      t.true(await sync.flush(), 'the sync goes through');
      t.like(errors, [{ code: 'ERR_KEEPCOUNT_FOREIGN_KEY', key: bucket }]);
      t.true(limiter.check('k').allowed, 'a loan from the bucket made anew');
      t.is(errors.length, 1);
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

/**
 * Three SyncedInflight nodes flushed by hand, leases of an hour: a holds 1 slot of `up`, b 2, c 4;
 * c then dies (its last sync pushed its slots). Resolves once all three have seen the total.
 */
async function leasedFleet(connection: Connection, name: string) {
  const nodes = ['a', 'b', 'c'].map((id, i) => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, nodeId: id });
    const errors = errorsOf(sync);
    const inflight = new SyncedInflight({ sync, name, seed: 7, leaseMs: 3_600_000 });
    inflight.enter('up', 2 ** i);
    inflight.enter('other', 1);
    return { sync, errors, inflight };
  });
  for (let round = 0; round < 2; round++) for (const node of nodes) await node.sync.flush();
  const [a, b, c] = nodes as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
  await c.sync.close();
  /** One sync of each live node, a first. */
  const round = async (): Promise<boolean[]> => [await a.sync.flush(), await b.sync.flush()];
  return { a, b, c, round };
}

test.serial(
  title(
    'a dead node’s slots leave once Redis loses the lease set or its contribution (DEL, FLUSHALL), long before its lease',
  ),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      for (const loss of ['i:l', 'i:n:c', 'i:n:a', 'FLUSHALL', 'i:c', 'i:m']) {
        const name = `dead-${loss}`;
        const { a, b, c, round } = await leasedFleet(connection, name);
        t.deepEqual([a.inflight.get('up'), b.inflight.get('up')], [7, 7], loss);
        // Without a loss, c's slots would count until its lease (an hour) ran out.
        await round();
        t.deepEqual([a.inflight.get('up'), b.inflight.get('up')], [7, 7], `${loss}: c still holds its lease`);
        await connection.send(loss === 'FLUSHALL' ? ['FLUSHALL'] : ['DEL', keyOf(name, loss)]);
        // The documented bound: exact again after three syncs of each live node.
        for (let i = 0; i < 3; i++) t.deepEqual(await round(), [true, true], loss);
        t.deepEqual(
          [a, b].map((node) => [node.inflight.get('up'), node.inflight.get('other')]),
          [
            [3, 2],
            [3, 2],
          ],
          `${loss}: the live nodes' slots, c's gone`,
        );
        t.deepEqual(await readInflight(connection, name, ['up', 'other']), [3, 2], `${loss}: in Redis`);
        t.deepEqual([...a.errors, ...b.errors, ...c.errors], [], loss);
        await a.sync.close();
        await b.sync.close();
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('maxmemory allkeys-lru evicting in-flight keys: the count comes back to what the live nodes hold'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const name = 'evicted';
      const { a, b, round } = await leasedFleet(connection, name);
      // Losing any of these is a loss of state (the registry alone only counts nodes).
      const keys = ['i:c', 'i:v', 'i:m', 'i:l', 'i:n:a', 'i:n:b', 'i:n:c'].map((suffix) => keyOf(name, suffix));
      // LRU idle time counts in seconds: make the structure's keys older than the filler.
      await sleep(2100);
      await connection.send(['CONFIG', 'SET', 'maxmemory-policy', 'allkeys-lru']);
      const used = Number(/used_memory:(\d+)/.exec(String(await connection.send(['INFO', 'memory'])))?.[1]);
      await connection.send(['CONFIG', 'SET', 'maxmemory', String(used + 256 * 1024)]);
      const filler = 'x'.repeat(1024);
      let evicted: string[] = [];
      for (let i = 0; evicted.length === 0; i++) {
        if (i === 100) throw new Error('Redis evicted none of the structure’s keys');
        for (let j = 0; j < 100; j++) await connection.send(['SET', `filler:${i}:${j}`, filler]);
        const exists = await Promise.all(keys.map((key) => connection.send(['EXISTS', key])));
        evicted = keys.filter((_, k) => Number(exists[k]) === 0);
      }
      await connection.send(['CONFIG', 'SET', 'maxmemory', '0']);
      t.log(`evicted: ${evicted.join(', ')}`);
      for (let i = 0; i < 3; i++) t.deepEqual(await round(), [true, true]);
      t.deepEqual(
        [a, b].map((node) => [node.inflight.get('up'), node.inflight.get('other')]),
        [
          [3, 2],
          [3, 2],
        ],
        `after evicting ${evicted.join(', ')}`,
      );
      t.deepEqual(await readInflight(connection, name, ['up', 'other']), [3, 2]);
      await a.sync.close();
      await b.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('maxmemory noeviction, Redis full: each sync fails whole and is reported, nothing is deleted'),
  async (t) => {
    // Redis at maxmemory under its default policy refuses writes. The sync must fail as a whole
    // (stale, then the fail policy, as in any outage), never half applied: run as a script without
    // flags, only its first write was refused, and that looked like corrupt values and was deleted.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const name = 'full';
      const { a, b, round } = await leasedFleet(connection, name);
      const keys = ['i:c', 'i:v', 'i:m', 'i:n:a', 'i:n:b'].map((suffix) => keyOf(name, suffix));
      await connection.send(['CONFIG', 'SET', 'maxmemory-policy', 'noeviction']);
      await connection.send(['CONFIG', 'SET', 'maxmemory', '1']);
      const before = [a.errors.length, b.errors.length];
      a.inflight.enter('up', 10);
      for (let i = 0; i < 3; i++) t.deepEqual(await round(), [false, false], 'every sync fails');
      await connection.send(['CONFIG', 'SET', 'maxmemory', '0']);
      const exists = await Promise.all(keys.map((key) => connection.send(['EXISTS', key])));
      t.deepEqual(exists.map(Number), [1, 1, 1, 1, 1], 'the structure’s keys are all there');
      for (const [n, node] of [a, b].entries()) {
        const failures = node.errors.slice(before[n]);
        t.true(failures.length > 0, 'the failures are reported');
        for (const error of failures) t.regex(error.message, /OOM/);
        t.false(
          failures.some((error) => (error as { code?: string }).code === 'ERR_KEEPCOUNT_CORRUPT'),
          'nothing taken for corrupt',
        );
      }
      t.deepEqual(
        [a, b].map((node) => node.inflight.get('up')),
        [17, 7],
        'while Redis refused, each node kept the others’ last counts (c’s lease too)',
      );
      for (let i = 0; i < 2; i++) t.deepEqual(await round(), [true, true]);
      t.deepEqual(
        [a, b].map((node) => [node.inflight.get('up'), node.inflight.get('other')]),
        [
          [17, 3],
          [17, 3],
        ],
      );
      await a.sync.close();
      await b.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

/**
 * Two SyncedInflight nodes on their own timers (`syncMs` 50, `timeoutMs` 200, leases of 300 ms),
 * each with its own client of `client`: a holds 2 slots of `up`, b 3.
 */
async function timedFleet(server: RedisServer, client: (typeof clientNames)[number], name: string) {
  const nodes = await Promise.all(
    [2, 3].map(async (slots) => {
      const connection = await connectClient(client, server.port);
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 50, timeoutMs: 200 });
      const errors = errorsOf(sync);
      const inflight = new SyncedInflight({ sync, name, seed: 7, leaseMs: 300 });
      inflight.enter('up', slots);
      return { connection, sync, errors, inflight };
    }),
  );
  const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
  /** Both nodes and a fresh reader see `total`, and Redis holds it, not a slot more. */
  const exact = async (total: number): Promise<boolean> =>
    a.inflight.get('up') === total &&
    b.inflight.get('up') === total &&
    (await readInflight(a.connection, name, ['up']))[0] === total;
  const stop = async (): Promise<void> => {
    for (const node of nodes) {
      await node.sync.close();
      await node.connection.close();
    }
  };
  return { a, b, exact, stop };
}

for (const client of clientNames) {
  test.serial(
    title(
      `${client}: Redis stopped (SIGSTOP) past the leases: requests never wait, syncs time out, exact after SIGCONT`,
    ),
    async (t) => {
      const server = await startRedis();
      const { a, b, exact, stop } = await timedFleet(server, client, 'sigstop');
      // One HTTP server with every synced middleware in front, on a sync of its own, flushed by hand
      // (no timer flush can be under way when Redis stops), that would wait a minute for Redis: its
      // answers cannot come from Redis while that sync is pending.
      const connection = await connectClient(client, server.port);
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, timeoutMs: 60_000 });
      const quota = new SyncedWindowQuota({ sync, name: 'sigstop-q', seed: 7, limit: 100, windowMs: 3_600_000 });
      const limiter = new SyncedLimiter({
        sync,
        name: 'sigstop-l',
        limit: { perSecond: 100, burst: 100 },
        creditAfterMs: 0,
      });
      const inflight = new SyncedInflight({ sync, name: 'sigstop-i', seed: 7 });
      const chain = [
        rateLimit({ quota, key: () => 'client' }),
        tokenBucket({ limiter, key: () => 'client' }),
        upstreamLimit({ max: 10, inflight }),
      ];
      const http = createServer((req: IncomingMessage, res: ServerResponse) => {
        const next = (i: number): void => {
          const middleware = chain[i];
          if (middleware === undefined) res.end('ok');
          else middleware(req, res, () => next(i + 1));
        };
        next(0);
      });
      try {
        const port = await listen(http);
        await until(() => exact(5), 'both nodes see 5 slots');
        t.true(await sync.flush());
        t.is((await get(port)).status, 200, 'a loan is in hand before Redis stops');
        server.pause();
        let settled = false;
        const pending = sync.flush().then((ok) => {
          settled = true;
          return ok;
        });
        // While Redis is stopped: a takes a slot, b gives one back; then past every lease.
        a.inflight.enter('up', 1);
        b.inflight.leave('up', 1);
        const replies = await Promise.all(Array.from({ length: 5 }, () => get(port)));
        t.deepEqual(
          replies.map((reply) => reply.status),
          [200, 200, 200, 200, 200],
        );
        t.false(settled, 'answered while the sync to the stopped Redis is still waiting');
        await sleep(600);
        for (const node of [a, b]) {
          t.true(node.sync.stale);
          t.like(node.errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Redis sync timed out after 200 ms' });
        }
        t.deepEqual(
          [a.inflight.get('up'), b.inflight.get('up')],
          [3 + 3, 2 + 2],
          "a stale node keeps the other's last count",
        );
        server.resume();
        const resumed = performance.now();
        // Every node's lease ran out meanwhile: the first to sync reaps the other, who pushes again.
        await until(() => exact(5), '5 slots again after SIGCONT', 5000);
        const back = performance.now() - resumed;
        t.log(`exact again ${back.toFixed(0)} ms after SIGCONT (syncMs 50)`);
        // The README's bound: three sync periods (a reaps b, b is told and marks its slots, b pushes
        // them), with 500 ms of room for event-loop delays on this shared, loaded machine. Not
        // exact: it fails on stalls of this process (both nodes and the poll run on it) adding up to
        // over 500 ms across those three syncs. Seen: 16–34 ms in 4 runs (both clients on both backends)
        // at load average 6. Odds small, not computed, not 0.
        t.true(back <= 3 * 50 + 500, `exact again after ${back} ms`);
        // The syncs queued during the stop are drained by now; ten more change nothing.
        for (let i = 0; i < 10; i++) t.true(await a.sync.flush());
        t.true(await exact(5), 'nothing counted twice');
        t.true(await pending);
      } finally {
        await close(http);
        await sync.close();
        await connection.close();
        await stop();
        await server.stop();
      }
    },
  );

  test.serial(
    title(`${client}: a restart without persistence under held slots comes back to exactly them`),
    async (t) => {
      const server = await startRedis();
      const { a, b, exact, stop } = await timedFleet(server, client, 'restart');
      try {
        await until(() => exact(5), 'both nodes see 5 slots');
        await server.restart();
        a.inflight.enter('up', 1);
        await until(() => exact(6), '6 slots after the restart');
        for (let i = 0; i < 10; i++) t.true(await b.sync.flush());
        t.true(await exact(6), 'nothing counted twice');
      } finally {
        await stop();
        await server.stop();
      }
    },
  );
}

test.serial(
  title('a slot taken in the sync that finds Redis emptied and left before the next leaves no count behind'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const [a, b] = [0, 1].map(() => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
        return { sync, slots: new SyncedInflight({ sync, name: 'emptied', seed: 5 }) };
      }) as [{ sync: RedisSync; slots: SyncedInflight }, { sync: RedisSync; slots: SyncedInflight }];
      t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      await connection.send(['FLUSHALL']);
      a.slots.enter('x');
      // This sync starts the entry over and applies x's slot into it; the leave comes before the next.
      t.true(await a.sync.flush());
      a.slots.leave('x');
      for (let round = 0; round < 3; round++) t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      // Before, A took its slot's counters for pushed at 0 and never sent the leave: B read 1 for good.
      t.deepEqual([a.slots.get('x'), b.slots.get('x')], [0, 0]);
      await Promise.all([a.sync.close(), b.sync.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
