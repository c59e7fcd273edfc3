/**
 * keepcount/redis against hostile input on a real redis-server: values of the right Redis type
 * that keepcount never writes into its keys (the syncs must go on, the entries rebuilt and
 * reported), and `'sync'`/`'error'` listeners that throw (the sync's result must stand).
 */
import test from 'ava';
import { KeyHasher } from '../lib/redis/hasher.js';
import { RedisSync, SyncedEstimator, SyncedLimiter } from '../lib/redis/index.js';
import { runFixture, title } from './helpers.js';
import { connectClient, type Connection } from './redis-clients.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';
import { ahead, BY_HAND, corruptOf, errorsOf, estimatorNodes, inflightNodes } from './redis-hostile.js';

/** Ways to write values keepcount never writes into its keys, each of the right Redis type. */
const corruptions: [string, (connection: Connection, base: string, bucket: string, node: string) => Promise<void>][] = [
  [
    'a global count that is no number',
    async (connection, base) => {
      const fields = (await connection.send(['HKEYS', `${base}:c`])) as string[];
      for (const field of fields) if (field !== 'i') await connection.send(['HSET', `${base}:c`, field, 'abc']);
    },
  ],
  [
    "the node's own contribution",
    async (connection, base, _bucket, node) => {
      const fields = (await connection.send(['HKEYS', `${base}:n:${node}`])) as string[];
      for (const field of fields) if (field !== 'i') await connection.send(['HSET', `${base}:n:${node}`, field, 'zz']);
    },
  ],
  ["the node's sequence number", (c, base, _b, node) => c.send(['HSET', `${base}:m`, `s:${node}`, 'oops']).then()],
  [
    // Before, the node's syncs were refused as another process's (ERR_KEEPCOUNT_NODE_ID), for good
    // on a sketch's entry, which has no lease and never expires.
    "the node's sequence number far ahead",
    (c, base, _b, node) => c.send(['HSET', `${base}:m`, `s:${node}`, '9e15']).then(),
  ],
  // Before, below 2^32 ahead, every later sync of the node was refused as a late one's, for good
  // (ERR_KEEPCOUNT_NODE_ID on a sketch's entry), unreported as corrupt.
  [
    "the node's sequence number just under 2^32 ahead",
    (c, base, _b, node) => ahead(c, `${base}:m`, node, 2 ** 32 - 1000),
  ],
  ["the node's sequence number 50 ahead", (c, base, _b, node) => ahead(c, `${base}:m`, node, 50)],
  ['the version counter', (c, base) => c.send(['HSET', `${base}:m`, 'v', 'notint']).then()],
  ['a version that names no cell', (c, base) => c.send(['ZADD', `${base}:v`, '999999', 'bogus']).then()],
  ['a version counter past every number', (c, base) => c.send(['HSET', `${base}:m`, 'v', '1e999']).then()],
  [
    // Lua reads it as a finite number; as a Lua number in the reply, Redis made it -2^63, and a
    // quota over that cell admitted everything. Pulled, not pushed: no HINCRBY trips on it.
    'a global count past 2^63 in a cell no node pushes',
    async (connection, base) => {
      for (const cell of new KeyHasher(4, 8192, 3).indexes('z')) {
        await connection.send(['HSET', `${base}:c`, String(cell), '1e300']);
        await connection.send(['ZADD', `${base}:v`, '999999', String(cell)]);
      }
    },
  ],
  ["a bucket's tokens", (c, _base, bucket) => c.send(['HSET', bucket, 't', 'garbage']).then()],
  ["a bucket's loans past 2^63", (c, _base, bucket) => c.send(['HSET', bucket, 'o:a', '1e308', 'x:a', '1e15']).then()],
  ["another node's lease in a bucket", (c, _base, bucket) => c.send(['HSET', bucket, 'x:someone', 'soon']).then()],
];

test.serial(
  title('values keepcount never writes, of the right Redis type: reported, their entry rebuilt, the syncs go on'),
  async (t) => {
    // Before, the script failed on them: every structure of the sync stopped syncing, for good
    // where the keys never expire (a sketch's).
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      for (const [index, [what, corrupt]] of corruptions.entries()) {
        const name = `corrupt-${index}`;
        const nodes = [0, 1].map(() => {
          const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
          return { sync, errors: errorsOf(sync), sketch: new SyncedEstimator({ sync, name, seed: 3 }) };
        });
        const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
        // 10 tokens that never refill.
        const limiter = new SyncedLimiter({
          sync: a.sync,
          name: `${name}-l`,
          limit: { ...HOURLY, burst: 10 },
          creditAfterMs: 0,
        });
        const round = async (): Promise<boolean[]> => [
          await a.sync.flush(),
          await b.sync.flush(),
          await a.sync.flush(),
        ];
        t.deepEqual(await round(), [true, true, true]);
        a.sketch.incr('x', 5);
        b.sketch.incr('x', 7);
        t.true(limiter.check('k').allowed);
        t.deepEqual(await round(), [true, true, true]);
        t.deepEqual([a.sketch.get('x'), b.sketch.get('x')], [12, 12]);
        const keys = (await connection.send(['KEYS', `keepcount:{${name}}:e:*:c`])) as string[];
        const base = (keys[0] as string).slice(0, -':c'.length);
        const bucket = `keepcount:{${name}-l}:b:k`;
        await corrupt(connection, base, bucket, a.sync.nodeId);
        a.sketch.incr('x', 1);
        t.true(limiter.check('k').allowed);
        t.deepEqual(await round(), [true, true, true], what);
        t.deepEqual(await round(), [true, true, true], what);
        t.deepEqual([a.sketch.get('x'), b.sketch.get('x')], [13, 13], `${what}: rebuilt, exact`);
        t.deepEqual([a.sketch.get('z'), b.sketch.get('z')], [0, 0], `${what}: never counted`);
        const reported = a.errors.filter((e) => (e as { code?: string }).code === 'ERR_KEEPCOUNT_CORRUPT');
        t.is(reported.length, 1, what);
        t.is((reported[0] as Error & { key: string }).key, what.includes('bucket') ? bucket : base, what);
        t.regex(String(reported[0]?.message), /held a value keepcount never writes \(.+\)/);
        for (let i = 0; i < 20; i++) limiter.check('k');
        t.deepEqual(await round(), [true, true, true], what);
        t.false(limiter.check('k').allowed, `${what}: the bucket's tokens ran out, so it syncs`);
        for (const node of nodes) await node.sync.close();
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a version of more cells than a pull takes: reported, the entry rebuilt, the pulls go on'),
  async (t) => {
    // Before, every pull stopped before that version and reported the one before it, so the next
    // pull stopped there again: the syncs succeeded, nothing was reported, and a sketch, whose
    // keys never expire, never saw another node's counts again. keepcount writes versions of at
    // most 2,048 cells (a push, a reaped node's chunk); a pull takes 4,096.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const { nodes, flush } = estimatorNodes(connection, 'big');
      const [a, b] = nodes;
      await flush(t, 1);
      const versions = ((await connection.send(['KEYS', 'keepcount:{big}:e:*:v'])) as string[])[0] as string;
      const cells = Array.from({ length: 4097 }, (_, i) => ['1', String(i)]).flat();
      await connection.send(['ZADD', versions, ...cells]);
      a.sketch.incr('x', 5);
      b.sketch.incr('x', 7);
      await flush(t, 3);
      t.deepEqual([a.sketch.get('x'), b.sketch.get('x')], [12, 12]);
      const reported = corruptOf([...a.errors, ...b.errors]);
      t.is(reported.length, 1);
      t.is(reported[0]?.key, versions.slice(0, -':v'.length));
      t.regex(String(reported[0]?.message), /never writes \(.*version 1 holds more than 4096 cells\)/);
      for (const node of nodes) await node.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('registry members scored past any liveness period: removed and reported once, nodes counted right'),
  async (t) => {
    // Before, the script dropped only members scored in the past: 50 ghosts scored 1e18 counted as
    // live nodes for good, so each node's 'local' share of a quota's limit fell to a fiftieth, and
    // a layout scored so passed for another layout syncing the structure, for good.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const { nodes, flush } = estimatorNodes(connection, 'reg');
      const [a, b] = nodes;
      await flush(t, 1);
      const ghosts = Array.from({ length: 50 }, (_, i) => ['1e18', `ghost${i}`]).flat();
      await connection.send(['ZADD', 'keepcount:{reg}:e:nodes', ...ghosts, '+inf', 'ghost']);
      await connection.send(['ZADD', 'keepcount:{reg}:e:layouts', '1e18', 'f3-4x8192-ghost']);
      await flush(t, 3);
      t.deepEqual([a.sketch.nodes, b.sketch.nodes], [2, 2]);
      t.is((await connection.send(['ZCARD', 'keepcount:{reg}:e:nodes'])) as number, 2);
      const errors = [...a.errors, ...b.errors];
      const reported = corruptOf(errors);
      t.deepEqual(reported.map((e) => e.key).sort(), ['keepcount:{reg}:e:layouts', 'keepcount:{reg}:e:nodes']);
      t.regex(String(reported.find((e) => e.key?.endsWith(':nodes'))?.message), /\(51 members scored past/);
      t.deepEqual(
        errors.filter((e) => (e as { code?: string }).code !== 'ERR_KEEPCOUNT_CORRUPT'),
        [],
      );
      for (const node of nodes) await node.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a 'sync' or 'error' listener that throws: the sync's result stands, the error goes on uncaught"),
  async (t) => {
    // Before, flush() rejected with the listener's error (uncaught from the timer), the 'error'
    // listener heard its own error back, and a sync that succeeded counted as a failure too.
    const server = await startRedis();
    try {
      const run = async (which: string) => {
        const child = await runFixture('throwing-listener.ts', {
          env: { REDIS_PORT: String(server.port) },
          args: [which],
        });
        t.is(child.code, 0, child.stderr);
        return JSON.parse(child.stdout) as Record<string, unknown>;
      };
      t.deepEqual(await run('sync'), {
        flushed: 'true',
        syncs: 1,
        failures: 0,
        heard: [],
        uncaught: ['bug in the sync listener'],
      });
      t.deepEqual(await run('error'), {
        flushed: 'false',
        syncs: 0,
        failures: 1,
        heard: ['Redis sync of "listener" failed: unreachable'],
        uncaught: ['bug in the error listener'],
      });
    } finally {
      await server.stop();
    }
  },
);

test.serial(
  title("a node's count driven past 2^63 saturates: the syncs go on and the fleet keeps its counts"),
  async (t) => {
    // Before, the script refused the pushed value as corrupt and every sync of that node deleted
    // the counter's whole fleet-wide state: the other node's slots of other keys vanished.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const nodes = inflightNodes(connection, 'huge');
      const [a, b] = nodes;
      b.slots.enter('other', 7);
      for (let i = 0; i < 1100; i++) a.slots.enter('huge', Number.MAX_SAFE_INTEGER);
      for (let round = 0; round < 2; round++) {
        t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      }
      t.deepEqual([a.slots.get('other'), b.slots.get('other')], [7, 7], "the other node's slots stand");
      // A's own count goes on past what it pushes (as a local Inflight's, up to ±2^63).
      t.true((a.slots.get('huge') as number) > Number.MAX_SAFE_INTEGER);
      t.is(b.slots.get('huge'), Number.MAX_SAFE_INTEGER, 'the fleet sees the push, saturated');
      t.deepEqual([...a.errors, ...b.errors], []);
      // So an enter and its leave past the saturation pair up: before, each step saturated, and
      // two enters of 2^53 − 1 and their two leaves ended at −(2^53 − 1).
      for (const step of [1, 1, -1, -1]) {
        if (step > 0) a.slots.enter('pair', Number.MAX_SAFE_INTEGER);
        else a.slots.leave('pair', Number.MAX_SAFE_INTEGER);
      }
      t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      t.deepEqual([a.slots.get('pair'), b.slots.get('pair')], [0, 0]);
      await Promise.all(nodes.map(({ sync }) => sync.close()));
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
