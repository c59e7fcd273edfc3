/**
 * keepcount/redis against hostile input on a real redis-server, in what nodes lease and number:
 * lease sets, `SyncedLimiter` buckets and sequence numbers holding values keepcount never writes
 * (the key must serve again, reported once, nothing counted twice or lost), what honest nodes
 * write at the bounds (nothing reported), and a sync that runs after later ones.
 */
import test, { type ExecutionContext } from 'ava';
import { RedisSync, SyncedEstimator, SyncedLimiter, type SendCommand } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient, type Connection } from './redis-clients.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';
import { ahead, BY_HAND, corruptOf, errorsOf, estimatorNodes, inflightNodes } from './redis-hostile.js';

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

test.serial(
  title("a node's sequence number set ahead: that sync's node count and layouts stand; set to its next: pushed again"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const node = (seed: number) => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND });
        return { sync, errors: errorsOf(sync), sketch: new SyncedEstimator({ sync, name: 'e', seed }) };
      };
      // A third node of another seed: another layout of the same name, reported once to each.
      const [a, b, other] = [node(3), node(3), node(4)];
      const flushAll = async () => {
        for (const n of [a, b, other]) t.true(await n.sync.flush());
      };
      await flushAll();
      await flushAll();
      const codes = (n: typeof a) => n.errors.splice(0).map((error) => (error as { code?: string }).code);
      t.deepEqual(codes(a), ['ERR_KEEPCOUNT_LAYOUT']);
      const metas = (await connection.send(['KEYS', 'keepcount:{e}:*:m'])) as string[];
      const meta = (await Promise.all(
        metas.map(async (key) => ((await connection.send(['HGET', key, `s:${a.sync.nodeId}`])) === null ? '' : key)),
      ).then((keys) => keys.find((key) => key !== ''))) as string;
      await ahead(connection, meta, a.sync.nodeId, 50);
      t.true(await a.sync.flush());
      // Before, the overtaken entry was left out: nodes read 1, and the layout was reported again.
      t.is(a.sync.nodes, 3, 'the overtaken sync counts the nodes');
      t.deepEqual(codes(a), ['ERR_KEEPCOUNT_CORRUPT']);
      t.true(await a.sync.flush());
      t.is(a.sync.nodes, 3);
      t.deepEqual(codes(a), [], 'the layout not reported again');
      // The node's next number written before it sends it: Redis takes the call for a retry of one
      // that applied, and applies nothing. Before, the node took its push for sent: lost for good.
      a.sketch.incr('x', 100);
      await connection.send(['HSET', meta, `s:${a.sync.nodeId}`, String(a.sync.sequence + 1)]);
      for (let round = 0; round < 2; round++) await flushAll();
      t.deepEqual([a.sketch.get('x'), b.sketch.get('x')], [100, 100], 'the push sent again, counted once');
      for (let round = 0; round < 2; round++) await flushAll();
      t.is(b.sketch.get('x'), 100);
      t.deepEqual([codes(a), codes(b)], [[], ['ERR_KEEPCOUNT_LAYOUT']]);
      await Promise.all([a, b, other].map((n) => n.sync.close()));
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
