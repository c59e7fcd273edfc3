/**
 * keepcount/redis against hostile input on a real redis-server: values of the right Redis type
 * that keepcount never writes into its keys (the syncs must go on, the entries rebuilt and
 * reported), and `'sync'`/`'error'` listeners that throw (the sync's result must stand).
 */
import test, { type ExecutionContext } from 'ava';
import { KeyHasher } from '../lib/redis/hasher.js';
import { RedisSync, SyncedEstimator, SyncedInflight, SyncedLimiter, type SendCommand } from '../lib/redis/index.js';
import { runFixture, title } from './helpers.js';
import { connectClient, type Connection } from './redis-clients.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';

/** A sync whose timer never fires within a test: the spec flushes by hand, in an order it chooses. */
const BY_HAND = 60_000;

/** Errors a sync emitted, kept in order. */
function errorsOf(sync: RedisSync): Error[] {
  const errors: Error[] = [];
  sync.on('error', (error: Error) => errors.push(error));
  return errors;
}

/** Sets `node`'s sequence number in hash `key` `by` past the one there, its process token kept. */
async function ahead(connection: Connection, key: string, node: string, by: number): Promise<void> {
  const seq = Number(await connection.send(['HGET', key, `s:${node}`]));
  await connection.send(['HSET', key, `s:${node}`, String(seq + by)]);
}

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

/** The ERR_KEEPCOUNT_CORRUPT errors among `errors`. */
const corruptOf = (errors: Error[]): (Error & { key?: string })[] =>
  errors.filter((e) => (e as { code?: string }).code === 'ERR_KEEPCOUNT_CORRUPT');

/** Two nodes syncing one `SyncedEstimator` by hand on `connection`, each with the errors it reported. */
function estimatorNodes(connection: Connection, name: string) {
  const node = () => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
    return { sync, errors: errorsOf(sync), sketch: new SyncedEstimator({ sync, name, seed: 3 }) };
  };
  const nodes = [node(), node()] as const;
  /** Flushes both nodes `times` times, each flush succeeding. */
  const flush = async (t: ExecutionContext, times: number) => {
    for (let i = 0; i < times; i++)
      t.deepEqual([await nodes[0].sync.flush(), await nodes[1].sync.flush()], [true, true]);
  };
  return { nodes, flush };
}

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

/** Two nodes syncing one `SyncedInflight` by hand on `connection`, each under `nodeId` if given. */
function inflightNodes(connection: Connection, name: string, nodeId?: string) {
  const node = () => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, nodeId });
    return { sync, errors: errorsOf(sync), slots: new SyncedInflight({ sync, name, seed: 3 }) };
  };
  return [node(), node()] as const;
}

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

/** Two nodes syncing one `SyncedLimiter` by hand on `connection`, a bucket of `burst` that never refills. */
function limiterNodes(connection: Connection, name: string, burst: number, leaseMs?: number) {
  const node = () => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
    const limit = { ...HOURLY, burst };
    return {
      sync,
      errors: errorsOf(sync),
      limiter: new SyncedLimiter({ sync, name, limit, leaseMs, creditAfterMs: 0 }),
    };
  };
  const nodes = [node(), node()] as const;
  /** Flushes both nodes `times` times, each flush succeeding. */
  const flush = async (t: ExecutionContext, times: number) => {
    for (let i = 0; i < times; i++)
      t.deepEqual([await nodes[0].sync.flush(), await nodes[1].sync.flush()], [true, true]);
  };
  /** Checks `k` `times` times on every node and flushes, twice: what the fleet admitted. */
  const spend = async (t: ExecutionContext, times: number) => {
    let allowed = 0;
    for (let round = 0; round < 2; round++) {
      for (const { limiter } of nodes) for (let i = 0; i < times; i++) if (limiter.check('k').allowed) allowed++;
      await flush(t, 1);
    }
    return allowed;
  };
  return { nodes, flush, spend, bucket: `keepcount:{${name}}:b:k` };
}

/** The cap a `limiterNodes` bucket of `burst` has, as the script gets it (limiter.ts `#parse`). */
const hourlyCap = (burst: number) => burst + 2 * ((HOURLY.amount * 1e6) / (HOURLY.periodMs * 1e6)) * BY_HAND;

/**
 * Ways to write a bucket values past what keepcount writes, each of a number Redis reads: what the
 * report says, and what the fleet admits after them from a bucket left with 2 tokens. A node's
 * fields go as a lapsed lease's do, so 2, no more, no fewer; tokens start over full (10), as after
 * a lost bucket, the loans on it still counted.
 */
const outOfBounds: [string, RegExp, number, (c: Connection, bucket: string, node: string) => Promise<unknown>][] = [
  [
    'a lease far ahead',
    /the fields of 1 node\(s\) removed: x:ghost 9e15, past 14400000 ms from now/,
    2,
    (c, bucket) => c.send(['HSET', bucket, 'x:ghost', '9e15', 'o:ghost', '1e9', 'w:ghost', '0']),
  ],
  [
    'a vast want on a live lease',
    /the fields of 1 node\(s\) removed: w:ghost 1e15, outside 0 to /,
    2,
    (c, bucket) => c.send(['HSET', bucket, 'x:ghost', String(Date.now() + 600_000), 'w:ghost', '1e15']),
  ],
  [
    'a vast loan on a live lease',
    /the fields of 1 node\(s\) removed: o:ghost 1e15, outside -\d+\.?\d* to /,
    2,
    (c, bucket) => c.send(['HSET', bucket, 'x:ghost', String(Date.now() + 600_000), 'o:ghost', '1e15']),
  ],
  [
    'tokens far below any debt',
    /t -1e15, below -\d+.*: the bucket starts over full/,
    10,
    (c, b) => c.send(['HSET', b, 't', '-1e15']),
  ],
  ['a refill time far ahead', /at 9e15, past 14400000 ms from now/, 10, (c, b) => c.send(['HSET', b, 'at', '9e15'])],
  [
    // Before, the node's syncs were refused as another live process's, for good.
    "the node's own lease far ahead, under another process",
    /the fields of 1 node\(s\) removed: x:\S+ 9e15, past 14400000 ms from now/,
    2,
    (c, bucket, node) => c.send(['HSET', bucket, `x:${node}`, '9e15', `p:${node}`, 'another']),
  ],
  [
    // Before, the node's syncs were refused as another process's (ERR_KEEPCOUNT_NODE_ID), for good.
    "the node's own sequence number far ahead",
    /the fields of 1 node\(s\) removed: s:\S+ 9e15, more than 4294967296 past the sync \d+\)/,
    2,
    (c, bucket, node) => c.send(['HSET', bucket, `s:${node}`, '9e15']),
  ],
  [
    // Before, refused as a late sync's (ERR_KEEPCOUNT_NODE_ID) until the node's numbers passed it:
    // 13 years of syncs. The node read the reply, so its sync was no late one: numbered past, the
    // next applies, and the loan recorded beside the number is not given back a second time.
    "the node's own sequence number just under 2^32 ahead",
    /held a value keepcount never writes \(s:\S+ \d+, ahead of the sync \d+ this process was waiting on\)/,
    2,
    (c, bucket, node) => ahead(c, bucket, node, 2 ** 32 - 1000),
  ],
  [
    "the node's own sequence number 50 ahead",
    /held a value keepcount never writes \(s:\S+ \d+, ahead of the sync \d+ this process was waiting on\)/,
    2,
    (c, bucket, node) => ahead(c, bucket, node, 50),
  ],
];

test.serial(
  title("a bucket's values past what keepcount writes: removed and reported once, the key serves again"),
  async (t) => {
    // Before, the script counted any lease not yet run out, however far ahead, and any loan, want
    // or debt: one HSET (a ghost's loan of 1e9 scored 9e15, or tokens at -1e15) made the key
    // refuse everything fleet-wide, for good since every sync renews the bucket, unreported.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      for (const [index, [what, reason, admitted, corrupt]] of outOfBounds.entries()) {
        const { nodes, flush, spend, bucket } = limiterNodes(connection, `bounds-${index}`, 10);
        await flush(t, 1);
        t.is(await spend(t, 2), 8, what);
        await corrupt(connection, bucket, nodes[0].sync.nodeId);
        const after = await spend(t, 5);
        const errors = [...nodes[0].errors, ...nodes[1].errors];
        const reported = corruptOf(errors);
        t.is(reported.length, 1, what);
        t.is(reported[0]?.key, bucket, what);
        t.regex(String(reported[0]?.message), reason, what);
        t.is(errors.length, 1, what);
        t.is(after, admitted, what);
        for (const node of nodes) await node.sync.close();
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a lease set member scored past any lease: its node forgotten and reported once, its slots gone'),
  async (t) => {
    // Before, the script reaped only leases that ran out: a member scored 9e15 beside a copy of a
    // node's contribution kept those slots in the count for good, after that node had died.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const nodes = inflightNodes(connection, 'ghost');
      const [a, b] = nodes;
      a.slots.enter('k', 5);
      for (let i = 0; i < 2; i++) t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      t.is(b.slots.get('k'), 5);
      const leases = ((await connection.send(['KEYS', 'keepcount:{ghost}:*:l'])) as string[])[0] as string;
      const base = leases.slice(0, -':l'.length);
      const mine = (await connection.send(['HGETALL', `${base}:n:${a.sync.nodeId}`])) as string[];
      await connection.send(['HSET', `${base}:n:ghost`, ...mine]);
      for (let j = 0; j < mine.length; j += 2) {
        if (mine[j] !== 'i') await connection.send(['HINCRBY', `${base}:c`, mine[j] as string, mine[j + 1] as string]);
      }
      await connection.send(['ZADD', leases, '9e15', 'ghost']);
      for (let i = 0; i < 2; i++) t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true]);
      t.deepEqual([a.slots.get('k'), b.slots.get('k')], [5, 5], "only A's slots count");
      const members = (await connection.send(['ZRANGE', leases, '0', '-1'])) as string[];
      t.deepEqual(members.sort(), ['', a.sync.nodeId, b.sync.nodeId].sort());
      const errors = [...a.errors, ...b.errors];
      const reported = corruptOf(errors);
      t.is(reported.length, 1);
      t.is(reported[0]?.key, leases);
      t.regex(String(reported[0]?.message), /\(1 members scored past 14400000 ms from now, their nodes forgotten\)/);
      t.is(errors.length, 1);
      for (const node of nodes) await node.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a bucket at the longest lease, a clock step back, debt from closed nodes, a vast cost: nothing reported'),
  async (t) => {
    // The bounds must never catch what honest nodes write. A want is bounded where it is written:
    // before, one check of a vast cost asked Redis for all of it.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const { nodes, flush, bucket } = limiterNodes(connection, 'legit', 10, 7_200_000);
      const [a, b] = nodes;
      await flush(t, 1);
      t.false(a.limiter.check('k', 1e15).allowed);
      t.true(b.limiter.check('k').allowed);
      await flush(t, 1);
      const want = Number(await connection.send(['HGET', bucket, `w:${a.sync.nodeId}`]));
      t.is(want, 64 * (hourlyCap(10) + 1), "the vast cost's want, bounded");
      await flush(t, 1);
      // Nodes that start, spend their credit (their share of the burst) and close pay their debts
      // from the bucket: it goes below zero, and lends nothing until refilled.
      let borrowed = 0;
      for (let i = 0; i < 4; i++) {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
        const limiter = new SyncedLimiter({ sync, name: 'legit', limit: { ...HOURLY, burst: 10 }, creditAfterMs: 0 });
        t.true(await sync.flush());
        let allowed = 0;
        for (let j = 0; j < 10; j++) if (limiter.check('k').allowed) allowed++;
        t.true(allowed > 0);
        borrowed += allowed;
        limiter.close();
        t.true(await sync.close());
        nodes[0].errors.push(...errorsOf(sync));
      }
      await flush(t, 2);
      const fields = (await connection.send(['HGETALL', bucket])) as string[];
      const f = Object.fromEntries(fields.flatMap((v, j) => (j % 2 === 0 ? [[v, fields[j + 1]]] : [])));
      // A holds the whole burst (its vast want took it), so the bucket owes what the others borrowed.
      t.true(Math.abs(Number(f.t) + borrowed) < 0.01, `in debt: ${f.t}, after ${borrowed} borrowed`);
      const lease = Number(f[`x:${a.sync.nodeId}`]) - Date.now();
      t.true(lease > 7_100_000 && lease <= 7_200_000, `the longest lease: ${lease}`);
      // At the bound itself, tokens are still taken for a debt.
      await connection.send(['HSET', bucket, 't', String(-(2 ** 32) * (hourlyCap(10) + 1))]);
      await flush(t, 2);
      // Redis's clock stepped back an hour (NTP, a VM resumed, a failover to a replica behind):
      // A's longest lease reads an hour further ahead, and is honest still.
      const stepped = Number(f[`x:${a.sync.nodeId}`]) + 3_600_000;
      await connection.send(['HSET', bucket, `x:${a.sync.nodeId}`, String(stepped)]);
      await flush(t, 2);
      t.deepEqual([...nodes[0].errors, ...nodes[1].errors], []);
      for (const node of nodes) await node.sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a node's own sequence number far ahead in a leased entry: reported once, the entry rebuilt, slots exact"),
  async (t) => {
    // Before, the node's syncs were refused as another process's (ERR_KEEPCOUNT_NODE_ID) until its
    // lease ran out and another node reaped its slots; alone, for good. No process numbers its
    // syncs 2^32 past one it still sends: the record is none it wrote.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      for (const [index, value] of ['9e15', '1e18'].entries()) {
        const [a, b] = inflightNodes(connection, `seq-${index}`);
        const flush = async (times: number) => {
          for (let i = 0; i < times; i++)
            t.deepEqual([await a.sync.flush(), await b.sync.flush()], [true, true], value);
        };
        a.slots.enter('k', 5);
        b.slots.enter('k', 2);
        await flush(2);
        t.deepEqual([a.slots.get('k'), b.slots.get('k')], [7, 7]);
        const meta = ((await connection.send(['KEYS', `keepcount:{seq-${index}}:*:m`])) as string[])[0] as string;
        await connection.send(['HSET', meta, `s:${a.sync.nodeId}`, value]);
        a.slots.enter('k', 1);
        b.slots.leave('k', 1);
        await flush(3);
        t.deepEqual([a.slots.get('k'), b.slots.get('k')], [7, 7], `${value}: none lost or counted twice`);
        const errors = [...a.errors, ...b.errors];
        const reported = corruptOf(errors);
        t.is(reported.length, 1, value);
        t.is(reported[0]?.key, meta.slice(0, -':m'.length), value);
        t.regex(String(reported[0]?.message), /\(s:\S+ (9e15|1e18), more than 4294967296 past the sync \d+\)/);
        t.is(errors.length, 1, value);
        await Promise.all([a.sync.close(), b.sync.close()]);
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a record far ahead under another live process's token: still refused as that process's id"),
  async (t) => {
    // The rule takes only this process's own record for corrupt: a second live process under the
    // same nodeId never takes the first's record over, however far ahead it is.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const [first, second] = inflightNodes(connection, 'twin', 'host-a');
      first.slots.enter('k', 3);
      t.true(await first.sync.flush());
      const meta = ((await connection.send(['KEYS', 'keepcount:{twin}:*:m'])) as string[])[0] as string;
      await connection.send(['HSET', meta, 's:host-a', '9e15']);
      second.slots.enter('k', 4);
      t.false(await second.sync.flush(), 'the second process is refused');
      t.true(await first.sync.flush(), 'the first recovers');
      t.false(await second.sync.flush(), 'the second process is still refused');
      t.true(await first.sync.flush());
      t.deepEqual(
        second.errors.map((error) => (error as { code?: string }).code),
        ['ERR_KEEPCOUNT_NODE_ID', 'ERR_KEEPCOUNT_NODE_ID'],
      );
      t.deepEqual(
        corruptOf(first.errors).map((error) => error.key),
        [meta.slice(0, -':m'.length)],
      );
      t.is(first.errors.length, 1);
      t.is(first.slots.get('k'), 3, "the second process's slots never counted");
      await Promise.all([first.sync.close(), second.sync.close()]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a sync that runs after later ones, its reply given up on: refused, nothing reported or counted twice'),
  async (t) => {
    // Redis holds the node's record ahead of a late sync, as of a corrupt one: only the node tells
    // them apart, by reading the reply of the one it waits on. A late sync must apply nothing (its
    // counts are older, its loan one the node never takes in) and set nothing off.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      let held: string[] | undefined;
      let holding = false;
      const send: SendCommand = (args) => {
        if (!holding) return connection.send(args);
        held = args;
        return new Promise(() => undefined);
      };
      const sync = new RedisSync({ sendCommand: send, syncMs: BY_HAND, timeoutMs: 100 });
      const errors = errorsOf(sync);
      const sketch = new SyncedEstimator({ sync, name: 'late', seed: 3 });
      const limiter = new SyncedLimiter({ sync, name: 'late-l', limit: { ...HOURLY, burst: 10 }, creditAfterMs: 0 });
      const { nodes, flush } = estimatorNodes(connection, 'late');
      let admitted = 0;
      const check = (times: number) => {
        for (let i = 0; i < times; i++) if (limiter.check('k').allowed) admitted++;
      };
      t.true(await sync.flush());
      sketch.incr('x', 5);
      check(3);
      t.true(await sync.flush());
      holding = true;
      sketch.incr('x', 1);
      check(3);
      t.false(await sync.flush(), 'given up on');
      holding = false;
      sketch.incr('x', 1);
      check(3);
      t.true(await sync.flush());
      t.true(await sync.flush());
      // Delivered now, after two later syncs were applied: refused as ahead (3), its loan too (-3),
      // the entry and the bucket as they were, and the other nodes still see the later count.
      const meta = ((await connection.send(['KEYS', 'keepcount:{late}:*:m'])) as string[])[0] as string;
      const state = () => Promise.all([meta, 'keepcount:{late-l}:b:k'].map((key) => connection.send(['HGETALL', key])));
      const before = await state();
      const reply = (await connection.send(held as string[])) as unknown[];
      t.is(Number(reply[0]), 3);
      t.true(reply.map(String).includes('-3'));
      t.deepEqual(await state(), before, 'nothing applied');
      await flush(t, 1);
      t.deepEqual(
        nodes.map((node) => node.sketch.get('x')),
        [7, 7],
        'the late count never stands',
      );
      for (let round = 0; round < 4; round++) {
        check(5);
        t.true(await sync.flush());
        await flush(t, 1);
      }
      t.is(sketch.get('x'), 7);
      t.deepEqual(
        nodes.map((node) => node.sketch.get('x')),
        [7, 7],
        'counted once',
      );
      t.is(admitted, 10, 'a bucket of 10 that never refills: admitted once');
      t.deepEqual(
        errors.map((error) => (error as { code?: string }).code),
        ['ERR_KEEPCOUNT_SYNC'],
        'the timeout alone',
      );
      t.deepEqual([...nodes[0].errors, ...nodes[1].errors], []);
      await Promise.all([sync.close(), ...nodes.map((node) => node.sync.close())]);
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
