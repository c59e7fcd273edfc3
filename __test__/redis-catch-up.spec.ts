/**
 * keepcount/redis, a node that joins a busy fleet, against a real redis-server: a pull carries at
 * most 4,096 changed cells, oldest first, so a new node takes a few syncs to hold what the others
 * counted. `sync.ready()` waits for them (for a scan of each entry's counts, when the pulls cannot
 * tell); `stats.behind` tells the entries still pulling, without counting as staleness.
 */
import test from 'ava';
import { RedisSync, SyncedEstimator, SyncedInflight, SyncedRate, SyncedWindowQuota } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient, type Connection } from './redis-clients.js';
import { startRedis, type RedisServer } from '../tools/redis-server.js';

/** One window for a whole test: a clock that never moves. */
const windowMs = 60_000;
const start = 4_000_000 * windowMs + 5;
const clock = { now: () => start };

interface Pair {
  server: RedisServer;
  connections: Connection[];
}

async function pair(): Promise<Pair> {
  const server = await startRedis();
  const connections = [await connectClient('ioredis', server.port), await connectClient('ioredis', server.port)];
  return { server, connections };
}

async function stop({ server, connections }: Pair, ...syncs: RedisSync[]): Promise<void> {
  for (const sync of syncs) await sync.close();
  for (const connection of connections) await connection.close();
  await server.stop();
}

/** Flushes `sync` until nothing of what it counted waits to be pushed. */
async function pushAll(t: { true(value: boolean): void }, sync: RedisSync): Promise<void> {
  do t.true(await sync.flush());
  while (sync.stats.backlog > 0);
}

/**
 * Calls `sync.ready()` and returns once it has made its one sync (syncs are an hour apart): `onReady`
 * runs if that sync made it ready. A call still waiting rejects when the sync closes, ignored here.
 */
async function readyOnce(sync: RedisSync, onReady: () => void): Promise<void> {
  const synced = sync.stats.syncs;
  sync.ready().then(onReady, () => {});
  while (sync.stats.syncs === synced) await new Promise((resolve) => setTimeout(resolve, 1));
  await new Promise((resolve) => setImmediate(resolve));
}

test.serial(
  title(
    'a node that joins a busy window is ready only once it holds the others’ counts: a client at the limit is refused',
  ),
  async (t) => {
    const p = await pair();
    // A syncs only when flushed; B every 20 ms, the pace of ready()'s own syncs.
    const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 20, timeoutMs: 30_000 });
    try {
      const options = { name: 'q', seed: 7, limit: 100, windowMs, clock };
      const a = new SyncedWindowQuota({ sync: syncA, ...options });
      // 3,000 clients change about 11,000 counters, then the heavy client reaches the limit: its
      // counters change last, so they come last in a pull.
      for (let i = 0; i < 3000; i++) a.consume(`flood-${i}`);
      for (let i = 0; i < 100; i++) a.consume('heavy');
      await pushAll(t, syncA);
      t.true(syncA.stats.cellsPushed > 2 * 4096, `A pushed ${syncA.stats.cellsPushed} cells`);
      const b = new SyncedWindowQuota({ sync: syncB, ...options });
      await syncB.ready();
      t.true(syncB.stats.syncs > 1, `B synced ${syncB.stats.syncs} times`);
      t.true(b.current('heavy').count >= 100, `B counts ${b.current('heavy').count}`);
      // Before, ready() resolved after B's first pull (4,096 cells, none of them the heavy
      // client's): B admitted all 100 of its requests again.
      t.false(b.consume('heavy').allowed);
      t.is(syncB.stats.behind, 0);
    } finally {
      await stop(p, syncA, syncB);
    }
  },
);

test.serial(title('stats.behind counts the entries still pulling a backlog, and staleness does not'), async (t) => {
  const p = await pair();
  const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
  const syncB = new RedisSync({
    sendCommand: p.connections[1]!.send,
    syncMs: 3_600_000,
    timeoutMs: 30_000,
    staleAfterMs: 5000,
  });
  try {
    const a = new SyncedEstimator({ sync: syncA, name: 'e', seed: 7 });
    // 6,000 keys change about 17,000 of the sketch's 32,768 counters.
    for (let i = 0; i < 6000; i++) a.incr(`key-${i}`);
    a.incr('last', 50);
    await pushAll(t, syncA);
    const b = new SyncedEstimator({ sync: syncB, name: 'e', seed: 7 });
    const idle = new SyncedEstimator({ sync: syncB, name: 'idle', seed: 7 });
    t.true(await syncB.flush());
    t.is(syncB.stats.behind, 1, 'one entry of two is cut short');
    // 4,096 by version, and what the catch-up scan read of the entry (cells.ts PulledEntry).
    t.true(syncB.stats.cellsPulled > 4096, `B pulled ${syncB.stats.cellsPulled} cells`);
    let syncs = 1;
    while (syncB.stats.behind > 0) {
      t.false(syncB.stale);
      t.true(await syncB.flush());
      syncs++;
    }
    t.true(syncs >= 4 && syncs <= 6, `B caught up in ${syncs} syncs`);
    t.is(b.get('last'), a.get('last'));
    t.is(idle.get('last'), 0);
    // Caught up: ready() syncs once and resolves (with syncMs an hour, a second sync would hang).
    await syncB.ready();
    t.is(syncB.stats.syncs, syncs + 1);
  } finally {
    await stop(p, syncA, syncB);
  }
});

test.serial(title('ready() resolves after one sync when there is nothing to pull'), async (t) => {
  const p = await pair();
  // Syncs an hour apart: ready() waiting for a second sync would fail the test on its timeout.
  const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
  const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
  try {
    let now = start;
    const options = { name: 'q', seed: 7, limit: 100, windowMs, clock: { now: () => now }, heavyHitters: true };
    const a = new SyncedWindowQuota({ sync: syncA, ...options });
    new SyncedEstimator({ sync: syncA, name: 'e', seed: 7 });
    new SyncedInflight({ sync: syncA, name: 'i', seed: 7 });
    await syncA.ready();
    t.is(syncA.stats.syncs, 1, 'a fresh Redis: every entry is new');
    for (let i = 0; i < 10_000; i++) a.consume(`flood-${i}`);
    await pushAll(t, syncA);
    // Two windows on, the windows B syncs are new: A's counts are in one that ended.
    now += 2 * windowMs;
    const b = new SyncedWindowQuota({ sync: syncB, ...options });
    // Windows of 1 ms: by the time a sync's reply is in, windows newer than it carried have begun.
    new SyncedRate({ sync: syncB, name: 'r', seed: 7, intervalMs: 1 });
    await syncB.ready();
    // The rate's windows, on no clock of its own, sat on this process's clock at the first sync:
    // ready() counts the second, made at once on Redis's (an hour's wait would fail the test).
    t.is(syncB.stats.syncs, 2);
    t.is(syncB.stats.cellsPulled, 0);
    t.true(b.consume('flood-1').allowed);
  } finally {
    await stop(p, syncA, syncB);
  }
});

test.serial(
  title(
    'under a flood that outruns the pull, ready() still resolves once the node holds what was there when it joined',
  ),
  async (t) => {
    const p = await pair();
    const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    try {
      const a = new SyncedEstimator({ sync: syncA, name: 'e', seed: 7 });
      for (let i = 0; i < 4000; i++) a.incr(`early-${i}`);
      a.incr('early', 50);
      await pushAll(t, syncA);
      const b = new SyncedEstimator({ sync: syncB, name: 'e', seed: 7 });
      // Per sync of B, A changes about 6,000 counters and pushes three versions of 2,048: more
      // than B's pull of 4,096 carries, so every pull of B is cut short.
      let key = 0;
      for (let round = 0; round < 8; round++) {
        for (let i = 0; i < 1500; i++) a.incr(`flood-${key++}`);
        for (let i = 0; i < 3; i++) t.true(await syncA.flush());
        t.true(await syncB.flush());
        t.is(syncB.stats.behind, 1, `round ${round}`);
        t.false(syncB.stale);
      }
      // B's scan of the entry's counts went through: it holds every count A had made then. With
      // syncMs an hour, a ready() waiting for an uncut pull would hang.
      await syncB.ready();
      t.is(syncB.stats.behind, 1);
      t.true(b.get('early') >= 50, `B counts ${b.get('early')}`);
    } finally {
      await stop(p, syncA, syncB);
    }
  },
);

test.serial(title('under a flood, ready() does not wait for windows that began after the node joined'), async (t) => {
  const p = await pair();
  const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
  const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
  try {
    let now = start;
    const options = { name: 'q', seed: 7, limit: 100, windowMs: 1000, clock: { now: () => now } };
    const a = new SyncedWindowQuota({ sync: syncA, ...options });
    new SyncedWindowQuota({ sync: syncB, ...options });
    // A window per sync of B, and per sync of B three pushes of 2,048 by A (standing for a
    // flooding fleet): each window holds more than B's first pull of it carries, so B never
    // catches up with one before it ends. Before, ready() waited for that, window after window,
    // as long as the flood lasted. Each round, ready() makes one sync of B (syncMs is an hour).
    let key = 0;
    let ready = false;
    for (let round = 0; round < 10 && !ready; round++) {
      now += 1000;
      for (let i = 0; i < 3; i++) {
        for (let j = 0; j < 1500; j++) a.consume(`flood-${key++}`);
        t.true(await syncA.flush());
      }
      await readyOnce(syncB, () => (ready = true));
    }
    t.true(ready, 'ready within 10 windows of the flood');
  } finally {
    await stop(p, syncA, syncB);
  }
});

test(title('a ready() waiting between its tries rejects as soon as the sync closes'), async (t) => {
  // Redis unreachable and syncs an hour apart: ready() waits an hour between tries. Before, that
  // wait outlived close(), holding the process open for the rest of the hour.
  const sync = new RedisSync({
    sendCommand: async () => {
      throw new Error('unreachable');
    },
    syncMs: 3_600_000,
  });
  sync.on('error', () => {});
  new SyncedEstimator({ sync, name: 'e', seed: 7 });
  const waiting = sync.ready();
  await new Promise((resolve) => setTimeout(resolve, 20));
  const closedAt = performance.now();
  await sync.close();
  await t.throwsAsync(waiting, { code: 'ERR_KEEPCOUNT_CLOSED' });
  t.true(performance.now() - closedAt < 1000, 'rejected at once, not an hour later');
});

for (const kind of ['sketch', 'quota', 'quota with heavy hitters'] as const) {
  test.serial(title(`a ${kind}: ready() waits for a key the others touch while the node catches up`), async (t) => {
    const p = await pair();
    const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    try {
      const quota = { name: 's', seed: 7, limit: 100, windowMs, clock, clients: 3000 };
      const make = (sync: RedisSync) =>
        kind !== 'sketch'
          ? new SyncedWindowQuota({ sync, ...quota, heavyHitters: kind !== 'quota' })
          : new SyncedEstimator({ sync, name: 's', seed: 7 });
      const hit = (s: SyncedWindowQuota | SyncedEstimator, key: string): void => {
        if (s instanceof SyncedWindowQuota) s.consume(key);
        else s.incr(key);
      };
      const read = (s: SyncedWindowQuota | SyncedEstimator, key: string): number =>
        s instanceof SyncedWindowQuota ? s.current(key).count : s.get(key);
      const a = make(syncA);
      for (let i = 0; i < (kind === 'sketch' ? 6000 : 10_000); i++) hit(a, `early-${i}`);
      // A client at its limit (the quota) or a busy key: its counters change last, so they hold the
      // newest versions when B joins.
      for (let i = 0; i < 100; i++) hit(a, 'hot');
      await pushAll(t, syncA);
      const b = make(syncB);
      // Per sync of B, A counts 1,500 new keys (about 6,000 counters, three pushes of 2,048): every
      // pull of B is cut short. In the first round the hot key comes once more (refused, on the
      // quota, but counted), which gives its counters versions past those B's pulls have reached
      // when they pass the newest version of B's first pull. Before, that was all ready() waited
      // for: B had never pulled the hot key's counters, and read it as 0 (the quota admitted the
      // client's 100 requests again). Now B also scans the entry's counts until it went through.
      // Each round is one sync of B.
      let key = 0;
      let ready = false;
      for (let round = 0; round < 20 && !ready; round++) {
        for (let i = 0; i < 1500; i++) hit(a, `flood-${key++}`);
        if (round === 0) hit(a, 'hot');
        for (let i = 0; i < 3; i++) t.true(await syncA.flush());
        await readyOnce(syncB, () => (ready = true));
        t.true(syncB.stats.behind >= 1, `round ${round}: B's pulls are cut short`);
      }
      t.true(ready, 'ready() resolved under the flood');
      // A's count: 101, or with heavy hitters its exact lower bound (what A counted of the client
      // once it began tracking it).
      const theirs = read(a, 'hot');
      t.true(read(b, 'hot') >= theirs, `B counts ${read(b, 'hot')} of A's ${theirs}`);
      if (b instanceof SyncedWindowQuota) {
        let admitted = 0;
        for (let i = 0; i < 100; i++) if (b.consume('hot').allowed) admitted++;
        t.true(admitted <= Math.max(0, 100 - theirs), `B admitted ${admitted} more of a client A counted ${theirs} of`);
      }
    } finally {
      await stop(p, syncA, syncB);
    }
  });
}

/**
 * The catch-up scan's cursors a sync `command` sends, one per entry (the script's ARGV: script.ts):
 * `'0'` to begin a scan, `'-1'` for none, anything else to go on with one.
 */
function scanCursors(command: string[]): string[] {
  const args = command.slice(3 + Number(command[2]));
  const cursors: string[] = [];
  for (let k = 0, a = 5; k < Number(args[3]); k++, a += 8 + 2 * Number(args[a + 7])) cursors.push(args[a + 6]!);
  return cursors;
}

test.serial(
  title('a Redis restarted with its data in the middle of a node’s catch-up scan: ready() still waits for every count'),
  async (t) => {
    const server = await startRedis();
    const connections = [await connectClient('ioredis', server.port), await connectClient('ioredis', server.port)];
    // Redis restarts (its data saved first) right before B's syncs that go on with a scan, four
    // times: a restarted Redis hashes the cells into other buckets, so a cursor of the old process
    // walks the new one's cells out of order. Before, B's scan went on with it, skipped cells, and
    // went through: B was ready with hot clients' counters missing, and admitted them again.
    let restarts = 0;
    const sendB = async (command: string[]): Promise<unknown> => {
      // EVALSHA: the EVAL sent after it on the restarted Redis's NOSCRIPT carries the same cursor.
      const goesOn = scanCursors(command).some((cursor) => cursor !== '0' && cursor !== '-1');
      if (restarts < 4 && command[0] === 'EVALSHA' && goesOn) {
        restarts++;
        await connections[0]!.send(['SAVE']);
        await server.restart();
      }
      return connections[1]!.send(command);
    };
    const syncA = new RedisSync({ sendCommand: connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    const syncB = new RedisSync({ sendCommand: sendB, syncMs: 3_600_000, timeoutMs: 30_000 });
    try {
      const options = { name: 's', seed: 7, limit: 100, windowMs, clock, clients: 3000 };
      const a = new SyncedWindowQuota({ sync: syncA, ...options });
      for (let i = 0; i < 10_000; i++) a.consume(`early-${i}`);
      // Thirty clients at their limit: a scan that skips cells misses some of theirs.
      const hot = Array.from({ length: 30 }, (_, i) => `hot-${i}`);
      for (const key of hot) for (let i = 0; i < 100; i++) a.consume(key);
      await pushAll(t, syncA);
      const b = new SyncedWindowQuota({ sync: syncB, ...options });
      // As in the test above: every pull of B is cut short, and the hot clients' counters, changed
      // again in the first round, move ahead of B's pulls, so B holds them only from its scan.
      let key = 0;
      let ready = false;
      for (let round = 0; round < 40 && !ready; round++) {
        for (let i = 0; i < 1500; i++) a.consume(`flood-${key++}`);
        if (round === 0) for (const client of hot) a.consume(client);
        for (let i = 0; i < 3; i++) t.true(await syncA.flush());
        await readyOnce(syncB, () => (ready = true));
        t.true(syncB.stats.behind >= 1, `round ${round}: B's pulls are cut short`);
      }
      t.true(ready, 'ready() resolved under the flood');
      t.is(restarts, 4, 'Redis restarted in the middle of the scan');
      const missing = hot.filter((key) => b.current(key).count < 101);
      t.deepEqual(missing, [], `B counts ${hot.map((key) => b.current(key).count).join(', ')}`);
      for (const key of hot) t.false(b.consume(key).allowed, key);
    } finally {
      await stop({ server, connections }, syncA, syncB);
    }
  },
);

test.serial(
  title('a Redis user denied INFO still catches up: the scan goes on as before, no entry is lost'),
  async (t) => {
    const p = await pair();
    const syncA = new RedisSync({ sendCommand: p.connections[0]!.send, syncMs: 3_600_000, timeoutMs: 30_000 });
    // B syncs every 20 ms, the pace of ready()'s own syncs.
    const syncB = new RedisSync({ sendCommand: p.connections[1]!.send, syncMs: 20, timeoutMs: 30_000 });
    const errors: unknown[] = [];
    for (const sync of [syncA, syncB]) sync.on('error', (error) => errors.push(error));
    try {
      // An application's user is often kept from @dangerous commands, INFO among them, and so
      // are the scripts it runs. The scan then cannot name Redis's process: it goes on with its
      // cursor, as before. Had INFO's refusal failed the entry, the script would delete it as
      // corrupt (B's first sync found a new incarnation, nothing behind).
      t.is(await p.connections[0]!.send(['ACL', 'SETUSER', 'default', '-@dangerous']), 'OK');
      const a = new SyncedEstimator({ sync: syncA, name: 'e', seed: 7 });
      for (let i = 0; i < 6000; i++) a.incr(`key-${i}`);
      a.incr('last', 50);
      await pushAll(t, syncA);
      const b = new SyncedEstimator({ sync: syncB, name: 'e', seed: 7 });
      t.true(await syncB.flush());
      t.is(syncB.stats.behind, 1);
      await syncB.ready();
      t.deepEqual(errors, []);
      t.is(b.get('last'), a.get('last'));
      t.true(a.get('last') >= 50);
    } finally {
      await stop(p, syncA, syncB);
    }
  },
);
