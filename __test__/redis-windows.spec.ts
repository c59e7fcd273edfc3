/**
 * keepcount/redis windows and shared limits, against real redis-server processes (started here, on
 * loopback), real node processes and real HTTP servers: windows roll over together by the wall
 * clock, a node whose clock runs ahead counts early, and nodes sharing a limit overshoot it by no
 * more than the stated bound.
 */
import express from 'express';
import { createServer } from 'node:http';
import test from 'ava';
import { rateLimit } from '../lib/http/index.js';
import { RedisSync, SyncedRate, SyncedWindowQuota } from '../lib/redis/index.js';
import { runFixture, title } from './helpers.js';
import { close, get, listen } from './http-client.js';
import { clientNames, connectClient } from './redis-clients.js';
import { until } from './waits.js';
import { startRedis } from '../tools/redis-server.js';

test.serial(title('windows roll over together on every node, by the wall clock'), async (t) => {
  const server = await startRedis();
  const a = await connectClient('ioredis', server.port);
  const b = await connectClient('redis', server.port);
  try {
    let now = 1_000_000 * 1000 + 500;
    const clock = { now: () => now };
    const syncA = new RedisSync({ sendCommand: a.send, syncMs: 3_600_000 });
    const syncB = new RedisSync({ sendCommand: b.send, syncMs: 3_600_000 });
    const rateA = new SyncedRate({ sync: syncA, name: 'win', seed: 7, intervalMs: 1000, clock });
    const rateB = new SyncedRate({ sync: syncB, name: 'win', seed: 7, intervalMs: 1000, clock });
    t.is(rateA.observe('x', 3), 3);
    t.is(rateB.observe('x', 4), 4, 'B has not synced: it sees only its own');
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 7);
    t.is(rateB.observe('x', 0), 7);
    now += 1000;
    t.is(rateA.observe('x', 1), 1, 'a new window starts empty');
    t.is(rateA.rate('x'), 7, 'the previous window reads the fleet total');
    t.is(rateB.rate('x'), 7);
    t.true(await syncA.flush());
    t.true(await syncB.flush());
    t.is(rateB.observe('x', 0), 1);
    now += 2000;
    t.is(rateB.rate('x'), 0, 'two windows on, nothing is left');
    await syncA.close();
    await syncB.close();
  } finally {
    await a.close();
    await b.close();
    await server.stop();
  }
});

test.serial(
  title('a node whose own clock is windows off is ready only once it holds the fleet’s window on Redis’s clock'),
  async (t) => {
    // Before its first reply a node places its windows on its own Date.now(): that sync carried
    // windows Redis never saw, pulled nothing, and ready() resolved on it (a client at its limit
    // of 100 was admitted 100 more times).
    const server = await startRedis();
    const a = await connectClient('ioredis', server.port);
    const b = await connectClient('ioredis', server.port);
    const realNow = Date.now;
    try {
      for (const skewMs of [-120_000, 120_000]) {
        const name = `skewed${skewMs}`;
        const syncA = new RedisSync({ sendCommand: a.send, syncMs: 3_600_000 });
        const quotaA = new SyncedWindowQuota({ sync: syncA, name, seed: 7, limit: 100, windowMs: 60_000 });
        await syncA.ready();
        for (let i = 0; i < 100; i++) quotaA.consume('heavy');
        t.true(await syncA.flush());
        Date.now = () => realNow() + skewMs;
        const syncB = new RedisSync({ sendCommand: b.send, syncMs: 3_600_000 });
        const quotaB = new SyncedWindowQuota({ sync: syncB, name, seed: 7, limit: 100, windowMs: 60_000 });
        await syncB.ready();
        Date.now = realNow;
        t.is(quotaB.current('heavy').count, 100, `clock off by ${skewMs} ms`);
        t.false(quotaB.consume('heavy').allowed);
        await Promise.all([syncA.close(), syncB.close()]);
      }
    } finally {
      Date.now = realNow;
      await a.close();
      await b.close();
      await server.stop();
    }
  },
);

test.serial(title('a node whose clock runs ahead counts into the next window early'), async (t) => {
  const server = await startRedis();
  const a = await connectClient('ioredis', server.port);
  const b = await connectClient('ioredis', server.port);
  try {
    let now = 2_000_000 * 1000 + 800;
    const syncA = new RedisSync({ sendCommand: a.send, syncMs: 3_600_000 });
    const syncB = new RedisSync({ sendCommand: b.send, syncMs: 3_600_000 });
    const rateA = new SyncedRate({ sync: syncA, name: 'skew', seed: 7, intervalMs: 1000, clock: { now: () => now } });
    // B's clock is 300 ms ahead: at A's 800 ms it is already in the next window.
    const rateB = new SyncedRate({
      sync: syncB,
      name: 'skew',
      seed: 7,
      intervalMs: 1000,
      clock: { now: () => now + 300 },
    });
    rateA.observe('x', 2);
    rateB.observe('x', 5);
    t.true(await syncB.flush());
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 2, "B's events are not in A's window");
    now += 300;
    t.true(await syncA.flush());
    t.is(rateA.observe('x', 0), 5, 'A finds them once its clock reaches the window');
    await syncA.close();
    await syncB.close();
  } finally {
    await a.close();
    await b.close();
    await server.stop();
  }
});

test.serial(
  title(
    "windows are on Redis's clock: a node whose Date.now() steps an hour ahead and back stays in the fleet's window",
  ),
  async (t) => {
    // Before, windows were on each node's Date.now(): one consume during the step moved the node
    // an hour ahead for good (a clock that goes back stays), and the two nodes, each in its own
    // window, admitted 200 on a limit of 100.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const realNow = Date.now;
    try {
      const nodes = [0, 1].map(() => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
        return { sync, quota: new SyncedWindowQuota({ sync, name: 'step', seed: 7, limit: 100, windowMs: 60_000 }) };
      });
      const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
      for (const { sync } of nodes) t.true(await sync.flush());
      const skew = Math.abs(a.sync.now() - realNow());
      t.true(skew < 1000, `sync.now() is Redis's clock, here this machine's: ${skew} ms apart`);
      Date.now = () => realNow() + 3_600_000;
      try {
        a.quota.consume('probe', 0);
      } finally {
        Date.now = realNow;
      }
      let admitted = 0;
      for (let i = 1; i <= 300; i++) {
        for (const { quota } of nodes) if (quota.consume('client').allowed) admitted++;
        if (i % 10 === 0) for (const { sync } of nodes) t.true(await sync.flush());
      }
      // Each node admits on its own count and the other's as of its last sync: at most 10 apart.
      t.true(admitted <= 100 + 2 * 10, `the fleet admitted ${admitted} on a limit of 100`);
      t.true(await a.sync.flush());
      t.is(a.quota.current('client').count, b.quota.current('client').count, 'one window, one count');
      t.true(a.quota.current('client').resetMs <= 60_000);
      for (const { sync } of nodes) await sync.close();
    } finally {
      Date.now = realNow;
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a quota made before the first sync on a clock 5 minutes ahead moves to Redis's window once it is known"),
  async (t) => {
    // Made at start up, before any sync, a quota places its windows on this process's Date.now();
    // before, it stayed in that later window (a clock that goes back stays) until Redis's clock
    // caught up, counting apart from the fleet.
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    const realNow = Date.now;
    try {
      const make = () => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
        return { sync, quota: new SyncedWindowQuota({ sync, name: 'ahead', seed: 7, limit: 1000, windowMs: 60_000 }) };
      };
      const a = make();
      Date.now = () => realNow() + 300_000;
      let b;
      try {
        b = make();
        t.true(await b.sync.flush());
      } finally {
        Date.now = realNow;
      }
      t.true(await a.sync.flush());
      for (let i = 0; i < 100; i++) for (const { quota } of [a, b]) quota.consume('k');
      for (const { sync } of [a, b, a]) t.true(await sync.flush());
      t.deepEqual(
        [a, b].map(({ quota }) => quota.current('k').count),
        [200, 200],
        'one window for both',
      );
      for (const { sync } of [a, b]) await sync.close();
    } finally {
      Date.now = realNow;
      await connection.close();
      await server.stop();
    }
  },
);

// With heavy hitters the key is decided on the nodes' exact counts, which leave out what each node
// counted below the threshold: the bound grows by nodes × (threshold − 1).
for (const threshold of [undefined, 125]) {
  test.serial(
    title(
      `3 node processes overshoot a shared limit by no more than the stated bound${threshold === undefined ? '' : ` (heavyHitters, threshold ${threshold})`}`,
    ),
    async (t) => {
      const server = await startRedis();
      try {
        const syncMs = 50;
        const limit = 2000;
        const job = {
          mode: 'quota',
          client: 'ioredis',
          port: server.port,
          name: threshold === undefined ? 'overshoot' : 'overshoot-exact',
          seed: 7,
          syncMs,
          limit,
          startAt: Date.now() + 2000,
          durationMs: 1500,
          perMs: 5,
          heavyHitters: threshold === undefined ? undefined : { threshold },
        };
        const runs = await Promise.all(
          Array.from({ length: 3 }, () => runFixture('redis-node.ts', { args: [JSON.stringify(job)] })),
        );
        const results = runs.map((run) => {
          if (run.code !== 0) throw new Error(`node exited with ${run.code}: ${run.stderr}`);
          return JSON.parse(run.stdout) as {
            admitted: number;
            attempts: number;
            elapsedMs: number;
            maxSyncGapMs: number;
            commands: number;
          };
        });
        const admitted = results.reduce((sum, r) => sum + r.admitted, 0);
        // The bound: limit + (nodes − 1) × r × 2 × (syncMs + RTT), with r the fastest node's attempt
        // rate (an upper bound on its admission rate) and syncMs + RTT the longest measured gap
        // between one node's successful syncs (it includes event-loop delays on this shared machine).
        // Load widens the gaps and so the bound with them; the one thing not measured is r over the
        // gap that matters, which can beat the run's average (a node tries at most 5 a millisecond:
        // r = 5 would make the check exact, and looser). The overshoot seen was at most 62% of the
        // room (299–792 against 879–1,372; 12 runs, both backends, load average 5), and 5 a
        // millisecond is at most 1.3 times the averages seen: a false failure needs a node to keep
        // near that peak over the longest gap while the others' admissions land in it. Odds not
        // computed, small; none seen.
        const r = Math.max(...results.map((x) => x.attempts / x.elapsedMs));
        const gap = Math.max(...results.map((x) => x.maxSyncGapMs));
        const bound = limit + (results.length - 1) * r * 2 * gap + results.length * ((threshold ?? 1) - 1);
        const commandsPerSecond = results.map((x) => (x.commands / x.elapsedMs) * 1000);
        t.log(
          `admitted ${admitted} of limit ${limit} (overshoot ${admitted - limit}); bound ${Math.floor(bound)} ` +
            `(r ${r.toFixed(2)}/ms, longest sync gap ${gap.toFixed(1)} ms); ` +
            `commands/s per node ${commandsPerSecond.map((c) => c.toFixed(1)).join(', ')}`,
        );
        t.true(admitted >= limit, 'the limit itself is admitted');
        t.true(admitted <= bound);
        // "Redis sees at most 1000 / syncMs commands per node per second whatever the request
        // rate" (README): each node sent one script call per tick of its sync timer while it took
        // 5 requests a millisecond. A tick held back by a loaded machine runs once, late, and never
        // makes up the ones it missed, so load only lowers the count: false-failure probability 0.
        // Two commands of room: a tick at each end of the run, and timers that count whole
        // milliseconds (two ticks 50 ms apart by the loop's clock can be 49.1 ms apart).
        for (const [i, x] of results.entries()) {
          const most = Math.ceil(x.elapsedMs / syncMs) + 2;
          t.true(
            x.commands <= most,
            `node ${i} sent ${x.commands} commands in ${x.elapsedMs.toFixed(0)} ms, over ${most}`,
          );
        }
      } finally {
        await server.stop();
      }
    },
  );
}

for (const heavyHitters of [false, true]) {
  test.serial(
    title(
      `two Express servers with rateLimit on one SyncedWindowQuota share the limit (heavyHitters: ${heavyHitters})`,
    ),
    async (t) => {
      const server = await startRedis();
      const connections = await Promise.all(clientNames.map((name) => connectClient(name, server.port)));
      // The README's example, once per "machine": each with its own client, sync and quota; with
      // heavyHitters the client is decided on its exact count, added up across the machines.
      const machines = connections.map((connection) => {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: 20 });
        const quota = new SyncedWindowQuota({
          sync,
          name: 'api',
          seed: 7,
          limit: 10,
          windowMs: 3_600_000,
          heavyHitters,
        });
        const app = express();
        app.use(rateLimit({ quota, key: () => 'client' }));
        app.get('/', (_req, res) => void res.send('ok'));
        return { sync, quota, http: createServer(app) };
      });
      try {
        const ports = await Promise.all(machines.map((m) => listen(m.http)));
        const statuses: number[] = [];
        for (let i = 0; i < 20; i++) {
          statuses.push((await get(ports[i % 2] as number)).status);
          // Requests no faster than the syncs carry them: the next one goes out once both machines
          // count this one (the other through Redis, a sync of each later), so neither decides on a
          // stale count and none overshoots. Refused requests count too.
          await until(
            () => machines.every((m) => m.quota.current('client').count === i + 1),
            `both machines count request ${i + 1}`,
          );
        }
        t.deepEqual(statuses, [...Array(10).fill(200), ...Array(10).fill(429)]);
        const last = await get(ports[0] as number);
        t.is(last.status, 429);
        t.regex(String(last.headers.ratelimit), /^"default";r=0;t=\d+$/);
      } finally {
        for (const m of machines) {
          await close(m.http);
          await m.sync.close();
        }
        for (const connection of connections) await connection.close();
        await server.stop();
      }
    },
  );
}
