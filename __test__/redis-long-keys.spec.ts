/**
 * Long client keys in keepcount/redis, against a real redis-server: a SyncedLimiter keeps, sends
 * and counts a key longer than 256 code units in its bounded form (first 240 units, '…', 16 hex
 * digits of its SHA-256), the same on every node, so the fleet still shares one bucket per key; a
 * SyncedInflight counts it as given without remembering it; and a flood of distinct 16 kB keys
 * leaves a node's memory bounded by the form, not the key.
 */
import { createHash } from 'node:crypto';
import test from 'ava';
import { RedisSync, SyncedInflight, SyncedLimiter } from '../lib/redis/index.js';
import { runFixture, title } from './helpers.js';
import { clientNames, connectClient, type Connection } from './redis-clients.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';

/** The bounded form, computed here from its definition rather than by the helper under test. */
function expectedForm(key: string): string {
  const digest = createHash('sha256').update(key).digest('hex').slice(0, 16);
  return `${key.slice(0, 240)}…${digest}`;
}

// Two 16,000-character keys that differ only in their last character (so only the digest tells
// their forms apart), and a third with a bucket of its own size.
const LONG = 'k'.repeat(15_999) + 'a';
const TWIN = 'k'.repeat(15_999) + 'b';
const OWN = 'o'.repeat(16_000);

/** Two nodes, one per client library, each with its own RedisSync synced by hand. */
async function twoNodes(
  t: { teardown(fn: () => Promise<void>): void },
  server: RedisServer,
): Promise<{ syncs: RedisSync[]; connection: Connection }> {
  const connections = await Promise.all(clientNames.map((name) => connectClient(name, server.port)));
  const syncs = connections.map((connection) => new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 }));
  t.teardown(async () => {
    for (const sync of syncs) await sync.close();
    for (const connection of connections) await connection.close();
  });
  return { syncs, connection: connections[0] as Connection };
}

test.serial(
  title('two nodes share one SyncedLimiter bucket for a long key, exactly, and keep a twin key apart'),
  async (t) => {
    const server = await startRedis();
    t.teardown(() => server.stop());
    const { syncs, connection } = await twoNodes(t, server);
    const [a, b] = syncs.map(
      (sync) =>
        new SyncedLimiter({
          sync,
          name: 'long',
          limit: { perSecond: 0, burst: 10 },
          keys: [[OWN, { perSecond: 0, burst: 3 }]],
        }),
    ) as [SyncedLimiter, SyncedLimiter];
    // Before their first sync the nodes admit nothing (no credit either): the checks only tell
    // Redis their demand. Node A wants 10 of LONG and 5 of OWN; node B 10 of LONG and 10 of TWIN.
    for (let i = 0; i < 10; i++) {
      t.false(a.check(LONG).allowed);
      t.false(b.check(LONG).allowed);
      t.false(b.check(TWIN).allowed);
      if (i < 5) t.false(a.check(OWN).allowed);
    }
    // A asks first and is lent LONG's whole bucket (10 tokens never refilled); B, asking next, is
    // lent none of it, since both name the same bucket, but TWIN's 10 are all its own.
    const [syncA, syncB] = syncs as [RedisSync, RedisSync];
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    const admitted = (limiter: SyncedLimiter, key: string): number => {
      let n = 0;
      for (let i = 0; i < 20; i++) if (limiter.check(key).allowed) n++;
      return n;
    };
    t.is(admitted(a, LONG), 10, 'A spends the bucket it was lent');
    t.is(admitted(b, LONG), 0, 'B holds a loan of 0 from the same, empty, bucket');
    t.is(admitted(b, TWIN), 10, 'the twin key has a bucket of its own');
    t.is(admitted(a, OWN), 3, "the long key configured in `keys` gets its bucket's size");
    // The buckets in Redis, named by the forms: one for LONG shared by both nodes.
    const buckets = ((await connection.send(['KEYS', 'keepcount:{long}:b:*'])) as string[]).sort();
    t.deepEqual(buckets, [LONG, OWN, TWIN].map((key) => `keepcount:{long}:b:${expectedForm(key)}`).sort());
    // After another sync each, the fleet has still admitted LONG exactly 10 times.
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    t.is(admitted(a, LONG) + admitted(b, LONG), 0, 'no refill, nothing more lent');
  },
);

test.serial(title('two nodes count a long key together in a SyncedInflight, and a twin key apart'), async (t) => {
  const server = await startRedis();
  t.teardown(() => server.stop());
  const { syncs } = await twoNodes(t, server);
  const [a, b] = syncs.map((sync) => new SyncedInflight({ sync, name: 'long', seed: 7 })) as [
    SyncedInflight,
    SyncedInflight,
  ];
  // Three keys in a sketch of 4 rows × 8192: a false failure needs two of them to share a counter
  // in all four rows, probability at most 3 × 8192^-4 < 10^-15.
  t.is(a.enter(LONG, 3), 3);
  t.is(b.enter(LONG, 2), 2);
  b.enter(TWIN, 4);
  for (const sync of [...syncs, ...syncs]) t.true(await sync.flush());
  t.is(a.get(LONG), 5, 'both nodes count the long key as one');
  t.is(b.get(LONG), 5);
  t.is(a.get(TWIN), 4, 'the twin key counts apart');
  a.leave(LONG, 3);
  for (const sync of [...syncs, ...syncs]) t.true(await sync.flush());
  t.is(b.get(LONG), 2);
  t.is(a.local(LONG), 0);
});

test.serial(
  title('a flood of distinct 16 kB keys adds node memory bounded by the key form, not the key'),
  async (t) => {
    t.timeout(180_000);
    const server = await startRedis();
    t.teardown(() => server.stop());
    const count = 4000;
    const child = await runFixture('redis-long-key-flood.ts', {
      nodeArgs: ['--expose-gc'],
      args: [String(server.port), String(count)],
    });
    t.is(child.code, 0, child.stderr);
    const { heapAdded, rssAdded, admitted, buckets, longestBucket } = JSON.parse(child.stdout) as {
      heapAdded: number;
      rssAdded: number;
      admitted: number;
      buckets: number;
      longestBucket: number;
    };
    t.log(`heap +${(heapAdded / 1e6).toFixed(1)} MB, RSS +${(rssAdded / 1e6).toFixed(1)} MB, ${buckets} buckets`);
    t.is(admitted, 2 * count, 'every key admitted (on credit: the node had synced)');
    t.true(buckets >= count, `${buckets} bucket keys in Redis`);
    // 'keepcount:{flood}:b:' and the form: 240 bytes, '…' (3 bytes in UTF-8), 16 hex digits.
    t.is(longestBucket, 'keepcount:{flood}:b:'.length + 259);
    // The second phase's 4,000 accounts holding whole keys would add 64 MB (4,000 × 16,000 bytes):
    // before the bounded form, measured +64.6 MB heap and +67–68 MB RSS on either backend (and as
    // much with the form built from a slice of the key, which V8 keeps alive: lib/long-key.ts). With
    // it (2-core x64, Node 20, 2026-11-25): heap +2.8 MB native, +4.8 MB fallback; RSS +6 MB. The
    // bounds are half the unbounded cost.
    t.true(heapAdded < 32e6, `heap +${heapAdded} bytes`);
    t.true(rssAdded < 48e6, `RSS +${rssAdded} bytes`);
  },
);
