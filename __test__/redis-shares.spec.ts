/**
 * keepcount/redis' `'local'` shares after Redis lost its node registry, against a real
 * redis-server: the nodes register again one at a time and count 1, 2, …, N in turn, and a node
 * whose Redis goes away again before its next sync keeps dividing its share by the most it counted
 * within the registry's lifetime, not by its last count (`Census.shareNodes`).
 *
 * Every sync is a `flush()` on a sync whose timer never fires (`syncMs` an hour), so each node's
 * counts are the test's doing, not a timer's: the nodes count exactly 1, 2, 3, 4 after the restart,
 * and before the fix they admitted exactly 100, 50, 33 and 25 of a limit of 100.
 */
import test, { type ExecutionContext } from 'ava';
import { Census } from '../lib/redis/cells.js';
import { RedisSync, SyncedLimiter, SyncedWindowQuota } from '../lib/redis/index.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';
import { title } from './helpers.js';
import { connectClient } from './redis-clients.js';
import { sleep, until } from './waits.js';

/** A sync period no timer reaches in a test: every sync is a `flush()`. */
const SYNC_MS = 3_600_000;
const STALE_AFTER_MS = 300;
const NODES = 4;

/**
 * `NODES` syncs on one connection that the test cuts off (every command then fails at once), with
 * `make`'s structure on each: each syncs twice, in turn, so each counts them all; Redis restarts
 * without its data and each syncs once more, in turn (the kth counting k); then the connection is
 * cut and the test waits until every node is stale. Returns the structures, their counts at the
 * last sync, and a function that closes everything.
 */
async function afterRegistryLoss<T extends { readonly nodes: number }>(
  server: RedisServer,
  make: (sync: RedisSync) => T,
): Promise<{ structures: T[]; counts: number[]; close: () => Promise<void> }> {
  const connection = await connectClient('ioredis', server.port);
  const link = { cut: false };
  const sendCommand = (args: string[]): Promise<unknown> =>
    link.cut ? Promise.reject(new Error('cut off by the test')) : connection.send(args);
  const syncs = Array.from({ length: NODES }, () => {
    const sync = new RedisSync({ sendCommand, syncMs: SYNC_MS, timeoutMs: 1_000, staleAfterMs: STALE_AFTER_MS });
    sync.on('error', () => undefined);
    return sync;
  });
  const structures = syncs.map(make);
  const close = async (): Promise<void> => {
    link.cut = false;
    await Promise.all(syncs.map((sync) => sync.close()));
    await connection.close();
  };
  try {
    for (let round = 0; round < 2; round++) for (const sync of syncs) await sync.flush();
    if (!structures.every(({ nodes }) => nodes === NODES)) throw new Error('the nodes never counted each other');
    await server.restart();
    // Reconnected (ioredis queues the PING until then), before any node syncs again.
    await connection.send(['PING']);
    for (const sync of syncs) await sync.flush();
    const counts = structures.map(({ nodes }) => nodes);
    link.cut = true;
    await until(() => syncs.every((sync) => sync.stale), 'every node is stale');
    return { structures, counts, close };
  } catch (error) {
    await close();
    throw error;
  }
}

test.serial(
  title("'local' quota: nodes cut off just after Redis lost its node registry admit the limit between them"),
  async (t) => {
    const server = await startRedis();
    try {
      const limit = 100;
      const run = await afterRegistryLoss(
        server,
        (sync) => new SyncedWindowQuota({ sync, name: 'api', seed: 7, limit, windowMs: SYNC_MS, failPolicy: 'local' }),
      );
      try {
        t.deepEqual(run.counts, [1, 2, 3, 4], 'the nodes registered again one at a time');
        const admitted = run.structures.map((quota) => {
          let allowed = 0;
          for (let i = 0; i < 2 * limit; i++) if (quota.consume('client').allowed) allowed++;
          return allowed;
        });
        t.log(`4 nodes counting 1 to 4, limit 100, Redis away again: admitted ${admitted.join(', ')}`);
        // Before, each node divided by its last count: 100, 50, 33 and 25, 208 in all.
        t.deepEqual(
          run.structures.map((quota) => quota.share()),
          [25, 25, 25, 25],
        );
        t.deepEqual(admitted, [25, 25, 25, 25]);
      } finally {
        await run.close();
      }
    } finally {
      await server.stop();
    }
  },
);

test.serial(
  title("'local' limiter: nodes cut off just after Redis lost its node registry share one burst"),
  async (t) => {
    const server = await startRedis();
    try {
      // 100 tokens a second: a stale node's bucket starts empty (no live loan) and refills at
      // `rate / nodes` up to `burst / nodes`, full after a second whatever it divides by.
      const limit = { perSecond: 100, burst: 100 };
      const run = await afterRegistryLoss(
        server,
        (sync) => new SyncedLimiter({ sync, name: 'api', limit, failPolicy: 'local' }),
      );
      try {
        t.deepEqual(run.counts, [1, 2, 3, 4], 'the nodes registered again one at a time');
        for (const limiter of run.structures) limiter.check('k');
        await sleep(1_500);
        const start = performance.now();
        const admitted = run.structures.map((limiter) => {
          let allowed = 0;
          for (let i = 0; i < 2 * limit.burst; i++) if (limiter.check('k').allowed) allowed++;
          return allowed;
        });
        // Each bucket refills at `rate / nodes` while the others spend: at most `rate` in all.
        const refill = (limit.perSecond / 1_000) * (performance.now() - start);
        const total = admitted.reduce((a, b) => a + b, 0);
        t.log(`4 nodes counting 1 to 4, burst 100, Redis away again: admitted ${admitted.join(', ')}`);
        // Before, each node's bucket was `burst` over its last count: 100, 50, 33 and 25.
        t.true(total <= limit.burst + refill + NODES, `admitted ${total}, refill ${refill.toFixed(1)}`);
        t.true(total >= limit.burst - NODES, `admitted ${total}: the buckets filled`);
      } finally {
        await run.close();
      }
    } finally {
      await server.stop();
    }
  },
);

test(title('the count shares divide by rises at once, holds through losses, drops a lifetime of syncs on'), (t) => {
  // The registry's lifetime is 10 of a node's syncs (LIVE_PERIODS); times are the syncs' own.
  const census = new Census({ nodes: 3, syncMs: 1 });
  t.is(census.shareNodes, 3, 'before the first count: the fallback');
  for (let i = 0; i < 50; i++) census.count(8, i, false);
  t.deepEqual([census.nodes, census.shareNodes], [8, 8]);
  // Redis restarts empty before every other sync: each node counts those registered again before it.
  for (let i = 0; i < 20; i++) {
    census.count(1 + (i % 4), 50 + i, i % 2 === 0);
    t.is(census.shareNodes, 8, `8 held at sync ${i} by the losses since`);
  }
  // The last loss; the nodes register again, and 4 of them are left.
  census.count(1, 70, true);
  for (let i = 1; i <= 10; i++) census.count(Math.min(4, 1 + i), 70 + i, false);
  t.deepEqual([census.nodes, census.shareNodes], [4, 8], 'a lifetime of syncs after the last loss, not past it');
  census.count(4, 81, false);
  t.is(census.shareNodes, 4, 'past it');
  census.count(6, 82, false);
  t.is(census.shareNodes, 6, 'a higher count at once');
  for (let i = 0; i < 20; i++) census.count(6, 83 + i, false);
  // Every node cut off from Redis for a minute, no sync meanwhile, and the registry lost them: the
  // first back counts 2 (at most half of 6, a loss), the others count more as they register again.
  census.count(2, 60_000, false);
  t.deepEqual([census.nodes, census.shareNodes], [2, 6], 'the first count after a long cut-off: held');
  for (let i = 1; i <= 10; i++) census.count(Math.min(5, 2 + i), 60_000 + i, false);
  t.deepEqual([census.nodes, census.shareNodes], [5, 6], 'held a lifetime of syncs');
  census.count(5, 60_011, false);
  t.is(census.shareNodes, 5, 'a lifetime later');
  // Churn: 14 nodes, then short-lived ones coming and going around 8 that stay. A count one lower
  // is a node gone, not a lost registry: the 14 goes a lifetime after it was last counted.
  for (let i = 0; i < 12; i++) census.count(14, 70_000 + i, false);
  for (let i = 0; i < 300; i++) {
    census.count(8 + (i % 2), 70_100 + i, false);
    if (i === 9) t.is(census.shareNodes, 14, 'held a lifetime of syncs after it was last counted');
  }
  t.is(census.shareNodes, 9, 'churn of a node at a time holds the old count no longer');
});

test(title('a count after a registry lifetime with none holds the count before, as a loss does'), (t) => {
  // Sync period 10 ms: the registry keeps a node 200 ms; a gap of 190 ms or more may have lost all.
  const census = new Census({ nodes: 1, syncMs: 10 });
  for (let i = 0; i < 20; i++) census.count(4, i * 10, false);
  // Redis back for under a sync period, again and again, each time after its registry lapsed: the
  // nodes count 1, 2, 3, 4 in turn, and this one (the third) counts 3 after 3, no drop to half.
  for (let spell = 1; spell <= 30; spell++) {
    census.count(3, 200 + spell * 1_000, false);
    t.is(census.shareNodes, 4, `held at spell ${spell}`);
  }
  // Back to a sync every period: a lifetime of syncs on, the count it holds is the one it counts.
  for (let i = 1; i <= 10; i++) census.count(3, 30_200 + i * 10, false);
  t.is(census.shareNodes, 4, 'a lifetime of syncs after the last lapse');
  census.count(3, 30_310, false);
  t.is(census.shareNodes, 3, 'past it');
});

test(title('a count below the one held after a missed sync holds it; syncs in time let it go'), (t) => {
  const census = new Census({ nodes: 1, syncMs: 10 });
  for (let i = 0; i < 20; i++) census.count(4, i * 10, false);
  // Syncs 30 ms apart (two missed each time), each counting 3: a faster node's registration may
  // have lapsed meanwhile, which this node's own periods cannot tell.
  for (let i = 1; i <= 15; i++) {
    census.count(3, 190 + i * 30, false);
    t.is(census.shareNodes, 4, `held after missed syncs ${i}`);
  }
  for (let i = 1; i <= 10; i++) census.count(3, 640 + i * 10, false);
  t.is(census.shareNodes, 4, 'a lifetime of syncs in time after the last miss');
  census.count(3, 750, false);
  t.is(census.shareNodes, 3, 'past it');
});

test(title('the entries of one sync call count once: a rate’s two windows do not halve the hold'), (t) => {
  const census = new Census({ nodes: 1, syncMs: 10 });
  // Both windows' entries take in the count of one call, sent at `sentAt`.
  const sync = (nodes: number, sentAt: number): void => {
    census.count(nodes, sentAt, false);
    census.count(nodes, sentAt, false);
  };
  for (let i = 0; i < 5; i++) sync(3, i * 10);
  for (let i = 1; i <= 10; i++) {
    sync(2, 40 + i * 10);
    t.is(census.shareNodes, 3, `held at sync ${i} after the drop`);
  }
  sync(2, 150);
  t.is(census.shareNodes, 2, 'a lifetime of syncs on');
});

test.serial(
  title("'local' quota: a node dropped from the registry is held for 10 of a node's syncs, not 5"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const syncs = Array.from({ length: 3 }, () => {
      const sync = new RedisSync({ sendCommand: (args) => connection.send(args), syncMs: SYNC_MS });
      sync.on('error', () => undefined);
      return sync;
    });
    try {
      const limit = 300;
      const quotas = syncs.map(
        (sync) => new SyncedWindowQuota({ sync, name: 'q', seed: 1, limit, windowMs: SYNC_MS, failPolicy: 'local' }),
      );
      for (let round = 0; round < 2; round++) for (const sync of syncs) await sync.flush();
      t.is(quotas[0]!.share(), limit / 3);
      // The third node gone from the registry, as one past its lifetime would be: 3 counted, then 2.
      await connection.send(['ZREM', 'keepcount:{q}:w:nodes', syncs[2]!.nodeId]);
      const shares: number[] = [];
      for (let i = 0; i < 11; i++) {
        await syncs[0]!.flush();
        shares.push(quotas[0]!.share());
      }
      // Before, each sync counted twice (the current window and the previous): 5 syncs held.
      t.deepEqual(shares, [...Array<number>(10).fill(limit / 3), limit / 2]);
    } finally {
      await Promise.all(syncs.map((sync) => sync.close()));
      await connection.close();
      await server.stop();
    }
  },
);

/**
 * 4 nodes under a `'local'` quota of 120, the kth syncing every `syncMsOf[k]` ms: Redis back for
 * moments, 14 times (a lifetime of syncs and more), each after `spellMs` cut off (past the registry's lifetime, so most or all of
 * the nodes' registrations lapse), while each node syncs once, in turn; then cut off for good.
 * The nodes must admit the limit between them.
 */
async function brieflyBack(t: ExecutionContext, syncMsOf: number[], spellMs: number): Promise<void> {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  // The node whose link is up (-1: none), so that each syncs once a spell, its timer's syncs failing.
  const link = { up: 0 };
  const syncs = syncMsOf.map((syncMs, node) => {
    const sendCommand = (args: string[]): Promise<unknown> =>
      link.up === node ? connection.send(args) : Promise.reject(new Error('cut off by the test'));
    const sync = new RedisSync({ sendCommand, syncMs, timeoutMs: 1_000, staleAfterMs: STALE_AFTER_MS });
    sync.on('error', () => undefined);
    return sync;
  });
  try {
    const limit = 120;
    const quotas = syncs.map(
      (sync) => new SyncedWindowQuota({ sync, name: 'q', seed: 1, limit, windowMs: SYNC_MS, failPolicy: 'local' }),
    );
    const syncEach = async (): Promise<void> => {
      for (const [node, sync] of syncs.entries()) {
        link.up = node;
        await sync.flush();
      }
      link.up = -1;
    };
    for (let round = 0; round < 2; round++) await syncEach();
    t.true(
      quotas.every((quota) => quota.nodes === NODES),
      'the nodes count each other',
    );
    // Each spell: cut off past the registry's lifetime, then back while each node syncs once, in
    // turn. The nodes count about 1, 2, 3, 4 each spell, under the same incarnation.
    const counts: number[][] = [];
    for (let spell = 0; spell < 14; spell++) {
      await sleep(spellMs);
      await syncEach();
      counts.push(quotas.map((quota) => quota.nodes));
    }
    await until(() => syncs.every((sync) => sync.stale), 'every node is stale');
    const admitted = quotas.map((quota) => {
      let allowed = 0;
      for (let i = 0; i < 2 * limit; i++) if (quota.consume('client').allowed) allowed++;
      return allowed;
    });
    t.log(`counted per spell: ${counts.map((c) => c.join('/')).join(', ')}; admitted ${admitted.join(', ')}`);
    // Before, only a count at most half the last held the 4: after six spells the shares were 120,
    // 60, 40 and 30, and the nodes admitted 250 between them.
    t.true(
      counts.every((spell) => spell[0]! < NODES),
      'the registry lapsed between spells',
    );
    t.deepEqual(admitted, Array<number>(NODES).fill(limit / NODES));
  } finally {
    link.up = -1;
    await Promise.all(syncs.map((sync) => sync.close()));
    await connection.close();
    await server.stop();
  }
}

test.serial(
  title("'local' quota: Redis back for moments, each after its registry lapsed, leaves the shares held"),
  // A sync every 10 ms: the registry keeps a node up to 200 ms after its last sync.
  (t) => brieflyBack(t, [10, 10, 10, 10], 300),
);

test.serial(
  title("'local' quota: Redis back for moments, one node syncing less often, leaves the shares held"),
  // The third node's registration outlives a spell, the others' not: it counted 3 after 4, below
  // its own lapse of 19 × 30 ms, and before held 3: shares 30, 30, 40, 30 (130 of 120).
  (t) => brieflyBack(t, [10, 10, 30, 10], 450),
);
