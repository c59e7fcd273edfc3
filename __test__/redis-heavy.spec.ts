/**
 * keepcount/redis `SyncedWindowQuota` with `heavyHitters`, against a real redis-server: a flood of
 * distinct keys that fills the synced sketch refuses no client within the limit, a client over it
 * is refused on the fleet's exact count, and the exact counts survive a Redis that lost its data.
 */
import test from 'ava';
import { rateLimit } from '../lib/http/index.js';
import { RedisSync, SyncedWindowQuota, type SyncedWindowQuotaOptions } from '../lib/redis/index.js';
import { throwsShape, title } from './helpers.js';
import { connectClient, type Connection } from './redis-clients.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';

/** One window for the whole test: a clock that never moves. */
const clock = { now: () => 3_000_000 * 60_000 + 5 };

/**
 * A quota of limit 5 on a sketch of one row of 4 counters: 400 keys fill every counter to ~100,
 * so the sketch alone refuses everyone.
 */
const tiny = { seed: 7, limit: 5, windowMs: 60_000, hashes: 1, slots: 4, clock };

interface Fleet {
  server: RedisServer;
  connections: Connection[];
  syncs: RedisSync[];
}

async function fleet(nodes: number): Promise<Fleet> {
  const server = await startRedis();
  const connections = await Promise.all(Array.from({ length: nodes }, () => connectClient('ioredis', server.port)));
  const syncs = connections.map((c) => new RedisSync({ sendCommand: c.send, syncMs: 3_600_000 }));
  return { server, connections, syncs };
}

async function stop({ server, connections, syncs }: Fleet): Promise<void> {
  for (const sync of syncs) await sync.close();
  for (const connection of connections) await connection.close();
  await server.stop();
}

const quotas = (f: Fleet, options: Partial<SyncedWindowQuotaOptions>): SyncedWindowQuota[] =>
  f.syncs.map((sync) => new SyncedWindowQuota({ sync, name: 'q', ...tiny, ...options }));

/** Flushes every node in turn, `rounds` times: what one node counted reaches every other. */
async function syncAll(t: { true(value: boolean): void }, f: Fleet, rounds = 2): Promise<void> {
  for (let r = 0; r < rounds; r++) for (const sync of f.syncs) t.true(await sync.flush());
}

test.serial(
  title('a flood of distinct keys fills the synced sketch: no client within the limit is refused'),
  async (t) => {
    const f = await fleet(2);
    try {
      const plain = f.syncs.map((sync) => new SyncedWindowQuota({ sync, name: 'plain', ...tiny }));
      const [a, b] = quotas(f, { heavyHitters: true });
      for (let i = 0; i < 400; i++) {
        plain[0]!.consume(`flood-${i}`);
        a!.consume(`flood-${i}`);
      }
      await syncAll(t, f);
      // On node B, a client sending 5 requests, its limit: the sketch alone refuses every one.
      t.false(plain[1]!.consume('client').allowed, 'the sketch alone refuses an innocent client');
      for (let i = 1; i <= 5; i++) {
        const decision = b!.consume('client');
        t.true(decision.allowed);
        t.is(decision.count, i, 'decided on its exact count');
        t.is(decision.remaining, 5 - i);
      }
      t.false(b!.consume('client').allowed, 'the sixth is over the limit');
      t.deepEqual(b!.heavyHitterStats(), { tracked: 1, capacity: 20_000, overflowEvents: 0 });
      t.is(a!.heavyHitterStats()!.tracked, 400);
      // Node A learns B's exact count at the syncs: the client is over the limit fleet-wide.
      await syncAll(t, f);
      t.is(a!.current('client').count, 6);
      t.false(a!.consume('client').allowed);
      // A flooding key that comes back is still within its limit on either node.
      t.true(a!.consume('flood-7').allowed);
      t.true(b!.consume('flood-7').allowed);
      t.is(b!.current('flood-7').count, 2);
    } finally {
      await stop(f);
    }
  },
);

test.serial(
  title('a client over the limit is refused on the nodes’ exact counts added up, refunds included'),
  async (t) => {
    const f = await fleet(3);
    try {
      // Threshold 2: each node misses at most one request of a key before it counts it exactly.
      const [a, b, c] = quotas(f, { heavyHitters: { threshold: 2 } });
      for (let i = 0; i < 400; i++) a!.consume(`flood-${i}`);
      let admitted = 0;
      // 2 requests on each node before they hear of each other: B and C count the second exactly
      // (their own estimate reaches 2 there), A both (its estimate is the flood's).
      for (const quota of [a, b, c]) for (let i = 0; i < 2; i++) if (quota!.consume('heavy').allowed) admitted++;
      t.is(admitted, 6);
      // Then 3 on each node in turn, syncing between: the fleet's exact count is 4, then 5 with A's
      // next request, the last admitted; B and C, which heard of it, refuse all of theirs.
      for (const quota of [a, b, c]) {
        await syncAll(t, f);
        for (let i = 0; i < 3; i++) if (quota!.consume('heavy').allowed) admitted++;
      }
      t.is(admitted, 7, 'the limit and the 2 requests counted below the threshold');
      t.true(admitted <= 5 + 3 * (2 - 1), 'within nodes × (threshold − 1) of the limit');
      t.is(c!.current('heavy').count, 15 - 2, 'every request but the 2 counted below the threshold');
      // A refund lowers the exact count (never below 0), and the fleet hears of it.
      const before = c!.current('heavy').count;
      c!.adjust('heavy', -1);
      t.is(c!.current('heavy').count, before - 1);
      c!.adjust('heavy', -100);
      await syncAll(t, f);
      t.is(c!.current('heavy').count, a!.current('heavy').count, 'every node reads the same fleet count');
    } finally {
      await stop(f);
    }
  },
);

test.serial(title('while a node of the quota does not count exactly, the others decide on the sketch'), async (t) => {
  const f = await fleet(2);
  try {
    // A rolling deploy turning heavyHitters on: A has it, B not yet.
    const a = new SyncedWindowQuota({ sync: f.syncs[0]!, name: 'q', ...tiny, heavyHitters: true });
    const b = new SyncedWindowQuota({ sync: f.syncs[1]!, name: 'q', ...tiny });
    for (let i = 0; i < 5; i++) t.true(b.consume('client').allowed);
    await syncAll(t, f);
    // B's 5 requests are in the sketch, not in the exact counts: on them A would admit 5 more.
    t.is(a.nodes, 2);
    t.is(a.current('client').count, 5, 'the sketch: B does not count exactly');
    t.false(a.consume('client').allowed, 'decided on the sketch: 6 > 5');
    t.is(a.heavyHitterStats()!.tracked, 1, 'counted exactly all the same');
  } finally {
    await stop(f);
  }
});

test.serial(title('exact counts come back after Redis loses its data'), async (t) => {
  const f = await fleet(2);
  try {
    const [a, b] = quotas(f, { heavyHitters: true });
    for (let i = 0; i < 400; i++) a!.consume(`flood-${i}`);
    for (let i = 0; i < 6; i++) a!.consume('heavy');
    await syncAll(t, f);
    t.is(b!.current('heavy').count, 6, 'A’s count, which B has pulled though it does not track the key');
    t.false(b!.consume('heavy').allowed, 'B: 1 + A’s 6');
    await f.connections[0]!.send(['FLUSHALL']);
    // The next sync of each node finds a new incarnation; the one after pushes everything again.
    await syncAll(t, f, 3);
    t.is(b!.current('heavy').count, 7, 'A’s 6 and B’s 1, counted again');
    t.false(b!.consume('heavy').allowed);
  } finally {
    await stop(f);
  }
});

test.serial(
  title("while Redis is away the 'local' fail policy decides a tracked client on its exact local count"),
  async (t) => {
    // A sync that reaches Redis once (one that never did refuses under 'local': it knows no node
    // count), then never again: stale 1 ms after that sync.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    let reachable = true;
    try {
      const sync = new RedisSync({
        sendCommand: async (args) => {
          if (!reachable) throw new Error('unreachable');
          return connection.send(args);
        },
        syncMs: 3_600_000,
        staleAfterMs: 1,
      });
      sync.on('error', () => {});
      const options = { sync, ...tiny, limit: 10, failPolicy: 'local' } as const;
      const plain = new SyncedWindowQuota({ ...options, name: 'plain' });
      const exact = new SyncedWindowQuota({ ...options, name: 'exact', heavyHitters: true });
      t.true(await sync.flush());
      reachable = false;
      for (let i = 0; i < 400; i++) {
        plain.consume(`flood-${i}`);
        exact.consume(`flood-${i}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 5));
      t.true(sync.stale);
      // One node: its share is the whole limit. The sketch's local count (the flood's) is far past it.
      t.false(plain.consume('client').allowed);
      for (let i = 0; i < 10; i++) t.true(exact.consume('client').allowed);
      t.false(exact.consume('client').allowed, 'its eleventh: over its share on its exact count');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('remaining only falls while two nodes begin counting a client exactly, and is 0 by the first refusal'),
  async (t) => {
    const f = await fleet(2);
    try {
      // A sketch big enough that the client is alone in its counters: the estimate is its count.
      // Threshold ceil(100 / 16) = 7: each node begins counting it exactly at its 7th request.
      const [a, b] = quotas(f, { heavyHitters: true, limit: 100, hashes: 4, slots: 1024 });
      // Each node's r, as far as it knows: a node that has not yet heard of the other's requests
      // reads more left than one that has, as it would with any lag.
      const last = [100, 100];
      let refused = false;
      for (let i = 1; i <= 130; i++) {
        const node = i % 2;
        const { allowed, remaining } = [a, b][node]!.consume('client');
        // Before, r was limit − the exact count from the moment the node began it: 95, then 99.
        t.true(remaining <= last[node]!, `node ${node}: r rose from ${last[node]} to ${remaining} at request ${i}`);
        if (!allowed && !refused) t.is(remaining, 0, `r at the first refusal (request ${i})`);
        refused ||= !allowed;
        last[node] = remaining;
        if (i % 10 === 0) await syncAll(t, f);
      }
      t.true(refused, 'the client went over the limit');
    } finally {
      await stop(f);
    }
  },
);

test.serial(
  title('a client gets at most the limit more per node whose table is full, as README bounds it'),
  async (t) => {
    const limit = 100;
    const threshold = 7;
    /** What a client alternating between two nodes gets, with `fillers` clients in node B's table of 50. */
    async function admitted(fillers: number): Promise<number> {
      const f = await fleet(2);
      try {
        const options = { seed: 7, limit, windowMs: 60_000, clock, heavyHitters: { threshold, capacity: 50 } };
        const [a, b] = f.syncs.map((sync) => new SyncedWindowQuota({ sync, name: 'q', ...options }));
        for (let i = 0; i < fillers; i++) for (let j = 0; j < threshold; j++) b!.consume(`filler-${i}`);
        await syncAll(t, f);
        let count = 0;
        // A sync after every request: no lag, so the bound's lag term is 0.
        for (let i = 0; i < 400; i++) {
          if ([a, b][i % 2]!.consume('client').allowed) count++;
          await syncAll(t, f, 1);
        }
        return count;
      } finally {
        await stop(f);
      }
    }
    const withRoom = await admitted(49);
    t.true(withRoom <= limit + 2 * (threshold - 1), `with room: ${withRoom}`);
    // B judges the client by the sketch and counts none of it exactly; A decides on the exact sum,
    // which leaves B's requests out. README's bound for one full node: up to `limit` more.
    const full = await admitted(50);
    t.true(full > withRoom, `a full table lets more through: ${full} against ${withRoom}`);
    t.true(full <= 2 * limit + 2 * (threshold - 1), `one full table: ${full}`);
  },
);

test.serial(title('past its capacity a node judges later clients by the sketch, and counts them'), async (t) => {
  const f = await fleet(1);
  try {
    const [a] = quotas(f, { heavyHitters: { capacity: 2 } });
    for (let i = 0; i < 400; i++) a!.consume(`flood-${i}`);
    t.false(a!.consume('client').allowed, 'untracked: its sketch estimate is over the limit');
    t.deepEqual(a!.heavyHitterStats(), { tracked: 2, capacity: 2, overflowEvents: 399 });
  } finally {
    await stop(f);
  }
});

test.serial(
  title('top talkers: the clients a node counts exactly, by their fleet-wide counts, per window'),
  async (t) => {
    const f = await fleet(2);
    try {
      let now = 3_000_001 * 60_000 + 5;
      const moving = { now: () => now };
      const [a, b] = quotas(f, { heavyHitters: true, clock: moving });
      for (let i = 0; i < 3; i++) a!.consume('x');
      a!.consume('y');
      for (let i = 0; i < 2; i++) b!.consume('x');
      for (let i = 0; i < 4; i++) b!.consume('z');
      await syncAll(t, f);
      const keys = (talkers: { key: unknown; lower: number }[]): [unknown, number][] =>
        talkers.map(({ key, lower }) => [key, lower]);
      t.deepEqual(
        keys(a!.topTalkers(10)),
        [
          ['x', 5],
          ['y', 1],
        ],
        'z sends to B only: B lists it',
      );
      t.deepEqual(keys(b!.topTalkers(10)), [
        ['x', 5],
        ['z', 4],
      ]);
      t.deepEqual(keys(rateLimit({ quota: b! }).topTalkers(1)), [['x', 5]], 'through the middleware');
      for (const talker of b!.topTalkers(10)) t.true(talker.upper >= talker.lower);
      // The next window: the last one is 'previous', and 'both' adds the two.
      now += 60_000;
      t.deepEqual(a!.topTalkers(10), []);
      a!.consume('x');
      t.deepEqual(keys(a!.topTalkers(10, 'previous')), [
        ['x', 5],
        ['y', 1],
      ]);
      t.deepEqual(keys(a!.topTalkers(10, 'both')), [
        ['x', 6],
        ['y', 1],
      ]);
      throwsShape(t, () => a!.topTalkers(-1), {
        instanceOf: RangeError,
        code: 'ERR_OUT_OF_RANGE',
        message: /^The "n" argument must be an integer in \[0, /,
      });
      throwsShape(t, () => a!.topTalkers(1, 'all' as 'both'), {
        instanceOf: TypeError,
        code: 'ERR_INVALID_ARG_TYPE',
        message: /^The "window" argument must be one of 'current', 'previous', 'both'/,
      });
      const plain = new SyncedWindowQuota({ sync: f.syncs[0]!, name: 'plain', ...tiny });
      plain.consume('x');
      t.deepEqual(plain.topTalkers(10), [], 'none without heavyHitters');
    } finally {
      await stop(f);
    }
  },
);

test.serial(title('bad heavyHitters settings are refused and leave the name free'), async (t) => {
  const f = await fleet(1);
  try {
    const sync = f.syncs[0]!;
    const make = (heavyHitters: unknown): SyncedWindowQuota =>
      new SyncedWindowQuota({ sync, name: 'bad', ...tiny, heavyHitters } as SyncedWindowQuotaOptions);
    const range = (name: string): { instanceOf: typeof RangeError; code: string; message: RegExp } => ({
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message: new RegExp(`^The "${name}" option must be`),
    });
    throwsShape(t, () => make('yes'), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "heavyHitters" option must be a boolean or an object/,
    });
    throwsShape(t, () => make({ threshold: 0 }), range('threshold'));
    throwsShape(t, () => make({ threshold: 6 }), range('threshold'));
    throwsShape(t, () => make({ threshold: 1.5 }), range('threshold'));
    throwsShape(t, () => make({ capacity: 0 }), range('capacity'));
    throwsShape(t, () => make({ capacity: 2 ** 24 + 1 }), range('capacity'));
    const made = make(false);
    t.is(made.heavyHitterStats(), undefined, 'none asked for');
    made.close();
  } finally {
    await stop(f);
  }
});
