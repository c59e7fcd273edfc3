/**
 * keepcount/redis' SyncedLimiter against a real redis-server: node processes hammering one key
 * (the overshoot bound over every window, a lower bound, a node left alone), Redis stopped with
 * SIGSTOP, and tokenBucket across two real HTTP servers.
 */
import { createServer } from 'node:http';
import test from 'ava';
import { tokenBucket } from '../lib/http/index.js';
import { RedisSync, SyncedLimiter } from '../lib/redis/index.js';
import { runFixture, throwsShape, title } from './helpers.js';
import { close, get, listen } from './http-client.js';
import { clientNames, connectClient } from './redis-clients.js';
import { sleep, syncsAfterNow, until } from './waits.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';
import { worstExcess } from './bucket-windows.js';

interface NodeResult {
  admitted: number[];
  attempts: number;
  thrown: number;
  startedAt: number;
  endedAt: number;
}

test.serial(
  title('3 node processes hammering one key stay within the stated bound; a node left alone gets the quota'),
  async (t) => {
    const server = await startRedis();
    try {
      const syncMs = 50;
      const perSecond = 1000;
      const burst = 200;
      const durationMs = 2000;
      const aloneMs = 1000;
      const job = {
        port: server.port,
        name: 'hammer',
        syncMs,
        perSecond,
        burst,
        nodes: 3,
        durationMs,
        perMs: 5,
      };
      // The third node goes on alone for aloneMs after the others stop.
      const running = Promise.all(
        [0, 1, 2].map((i) =>
          runFixture('redis-limiter-node.ts', {
            args: [JSON.stringify({ ...job, durationMs: i === 2 ? durationMs + aloneMs : durationMs })],
          }),
        ),
      );
      // Start them together once all three are registered (they can take many seconds to start).
      const connection = await connectClient('ioredis', server.port);
      const deadline = performance.now() + 50_000;
      while (Number(await connection.send(['ZCARD', 'keepcount:{hammer}:p:nodes'])) < 3) {
        if (performance.now() > deadline) throw new Error('the 3 nodes never registered');
        await sleep(20);
      }
      await connection.send(['SET', 'hammer:start', String(Date.now() + 500)]);
      await connection.close();
      const runs = await running;
      const results = runs.map((run) => {
        if (run.code !== 0) throw new Error(`node exited with ${run.code}: ${run.stderr}`);
        return JSON.parse(run.stdout) as NodeResult;
      });
      t.deepEqual(
        results.map((r) => r.thrown),
        [0, 0, 0],
      );
      const rate = perSecond / 1000;
      const times = results.flatMap((r) => r.admitted).sort((a, b) => a - b);
      // The stated bound over any window of t ms: burst + rate × t + slack, slack = burst + 2 × rate
      // × syncMs (400 here). worstExcess is the largest count − rate × t over every window. One
      // admission of room for timestamps from three processes.
      const slack = burst + 2 * rate * syncMs;
      const excess = worstExcess(times, rate);
      // Together: while all three hammer; alone: from 300 ms after the other two stopped.
      const allIn = Math.max(...results.map((r) => r.startedAt));
      const othersOut = Math.max(...results.slice(0, 2).map((r) => r.endedAt));
      const togetherSpan = Math.min(...results.map((r) => r.endedAt)) - allIn;
      const together = times.filter((at) => at >= allIn && at < allIn + togetherSpan).length;
      const aloneSpan = (results[2] as NodeResult).endedAt - othersOut - 300;
      const alone = times.filter((at) => at >= othersOut + 300).length;
      // The run's own premise, not the limiter's: fails if a node's start timer fires over 400 ms
      // late, or its process starts that late. The three hammered together for all but 2–4 ms in 2
      // runs (one per backend) at load average 6; timers 800 ms late have been seen on this
      // machine, so the odds are small, not 0.
      t.true(togetherSpan > 0.8 * durationMs, `all three hammered together for ${togetherSpan} ms`);
      t.log(
        `3 nodes × ${togetherSpan.toFixed(0)} ms at ${perSecond}/s, burst ${burst}: admitted ${together} ` +
          `(rate × t = ${(rate * togetherSpan).toFixed(0)}); worst window excess over rate × t ${excess.toFixed(1)} ` +
          `against burst + slack = ${burst + slack}; attempts ${results.map((r) => r.attempts).join(', ')}; ` +
          `alone: ${alone} in ${aloneSpan.toFixed(0)} ms (rate × t = ${(rate * aloneSpan).toFixed(0)})`,
      );
      t.true(excess <= burst + slack + 1, `excess ${excess}`);
      // Lower bounds, loose for this shared 2-core machine (a stretched sync period lends later, not
      // less): the fleet admits at least half the rate, and a node alone, once the others have left
      // (300 ms: a few syncs), at least 70% of it. Tokens lent late are lost only past the end of
      // the run, so these fail only if a node's syncs stall for about 1,000 ms (together) or 200 ms
      // (alone) at its end. Seen: 2,191–2,195 admitted of 998 needed together, 702–705 of 489
      // alone (2 runs, one per backend, load average 6). Odds small, not computed, not 0.
      t.true(together >= 0.5 * rate * togetherSpan, `together ${together}`);
      t.true(alone >= 0.7 * rate * aloneSpan, `alone ${alone}`);
    } finally {
      await server.stop();
    }
  },
);

test.serial(
  title('Redis stopped (SIGSTOP): checks never throw and follow the fail policy, loans resume after SIGCONT'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 50, timeoutMs: 200, staleAfterMs: 300 });
      sync.on('error', () => undefined);
      const limiter = (failPolicy: 'local' | 'open' | 'closed'): SyncedLimiter =>
        new SyncedLimiter({ sync, name: `stop-${failPolicy}`, limit: { perSecond: 100, burst: 10 }, failPolicy });
      const local = limiter('local');
      const open = limiter('open');
      const closed = limiter('closed');
      for (const l of [local, open, closed]) l.check('k');
      // A 200 ms timeout can catch a healthy sync on this loaded machine: wait for one to succeed.
      await until(() => sync.flush(), 'a sync succeeds before Redis is stopped');
      server.pause();
      // Staleness passes 300 ms, however late the timer fires.
      await until(() => sync.stale, 'the sync goes stale');
      t.true(sync.stale);
      t.false(closed.check('k').allowed, "'closed' refuses while stale");
      t.true(open.check('k').allowed, "'open' admits while stale");
      // 'local', one node known: a bucket of the whole quota on this node, 10 at once then 100/s.
      const started = performance.now();
      let admitted = 0;
      while (performance.now() - started < 300) {
        t.notThrows(() => {
          if (local.check('k').allowed) admitted++;
        });
        await sleep(1);
      }
      const elapsed = performance.now() - started;
      t.log(`'local' admitted ${admitted} in ${elapsed.toFixed(0)} ms while Redis was stopped`);
      t.true(admitted >= 10);
      t.true(admitted <= 10 + Math.ceil((elapsed * 100) / 1000) + 1);
      server.resume();
      await until(() => !sync.stale, 'the sync is fresh again after SIGCONT');
      t.false(sync.stale);
      t.true(closed.check('k').allowed, 'fresh again: a loan comes');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a node that stops syncing has its loan written off at its lease, and the other gets the whole rate'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      let dead = false;
      // A's link, until it "crashes": from then on its syncs fail (its process would be gone).
      const sendA = (args: string[]): Promise<unknown> =>
        dead ? Promise.reject(new Error('gone')) : connection.send(args);
      const syncA = new RedisSync({ sendCommand: sendA, syncMs: 20 });
      const syncB = new RedisSync({ sendCommand: connection.send, syncMs: 20 });
      syncA.on('error', () => undefined);
      const limit = { perSecond: 1000, burst: 50 };
      const a = new SyncedLimiter({ sync: syncA, name: 'crash', limit, leaseMs: 200 });
      const b = new SyncedLimiter({ sync: syncB, name: 'crash', limit, leaseMs: 200 });
      let lastSyncA = performance.now();
      syncA.on('sync', () => (lastSyncA = performance.now()));
      /**
       * Checks `k` on each limiter 5 times per millisecond of the wall clock (at least 5 times a
       * turn), however late `sleep(1)` returns on this loaded machine: the demand stays 5 times the
       * rate, so what is admitted measures the loans, not the loop. Until `done()`; the admissions
       * per limiter.
       */
      const hammer = async (limiters: SyncedLimiter[], done: () => boolean): Promise<number[]> => {
        const admitted = limiters.map(() => 0);
        let last = performance.now();
        while (!done()) {
          const now = performance.now();
          const checks = Math.max(5, Math.round(5 * (now - last)));
          last = now;
          limiters.forEach((limiter, i) => {
            for (let j = 0; j < checks; j++) if (limiter.check('k').allowed) admitted[i] = (admitted[i] as number) + 1;
          });
          await sleep(1);
        }
        return admitted;
      };
      const forMs = (ms: number): (() => boolean) => {
        const end = performance.now() + ms;
        return () => performance.now() >= end;
      };
      const shared = await hammer([a, b], forMs(500));
      dead = true;
      // B alone until A's share comes back, however late the timers fire: A's lease (200 ms) runs
      // out from its last successful sync, when Redis applied it (at or before A heard back); a
      // sync of B begun after that writes A's loan off, and the next lends on B's demand alone.
      let alone = false;
      const waiting = (async () => {
        await syncA.flush(); // a sync of A under way when it "crashed" may still succeed: let it end
        await until(() => performance.now() > lastSyncA + a.leaseMs, "A's lease runs out");
        await syncsAfterNow(syncB, 2, "B syncs twice after A's lease");
      })().finally(() => (alone = true));
      await hammer([b], () => alone);
      await waiting;
      const started = performance.now();
      const [admitted] = (await hammer([b], forMs(500))) as [number];
      const elapsed = performance.now() - started;
      t.log(`both: ${shared.join(' + ')} in 500 ms; B alone after A's lease: ${admitted} in ${elapsed.toFixed(0)} ms`);
      t.true(
        shared.every((n) => n > 50),
        'both got a share',
      );
      // At least 70% of the rate once A's loan is written off (loose for this shared machine), at
      // most the rate plus the bucket and its slack.
      t.true(admitted >= 0.7 * elapsed, `alone ${admitted}`);
      t.true(admitted <= elapsed + 2 * limit.burst + 2 * 20, `alone ${admitted}`);
      await syncA.close();
      await syncB.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(title('a failed sync keeps the demand it carried for the next one'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    let failing = false;
    const send = (args: string[]): Promise<unknown> =>
      failing ? Promise.reject(new Error('unreachable')) : connection.send(args);
    const sync = new RedisSync({ sendCommand: send, syncMs: 3_600_000 });
    sync.on('error', () => undefined);
    // 10 tokens, never refilled: what Redis lends depends only on the demand it is told.
    const limiter = new SyncedLimiter({ sync, name: 'demand', limit: { perSecond: 0, burst: 10 }, creditAfterMs: 0 });
    const asked = async (): Promise<number> =>
      Number(await connection.send(['HGET', 'keepcount:{demand}:b:k', `w:${sync.nodeId}`]));
    t.false(limiter.check('k').allowed, 'no credit before the first sync');
    t.true(await sync.flush());
    t.true(limiter.check('k').allowed, 'from the loan the refused check asked for');
    t.true(await sync.flush());
    t.is(await asked(), 1);
    // Lent 1 (8 left): one from the loan, two more on credit from what the bucket had left.
    for (let i = 0; i < 3; i++) t.true(limiter.check('k').allowed);
    failing = true;
    t.false(await sync.flush());
    failing = false;
    t.true(limiter.check('k').allowed);
    t.true(await sync.flush());
    // Four checked since the last sync Redis heard, and three owed: 4 had the failed sync's demand been lost.
    t.is(await asked(), 7, "the failed sync's demand went with the next one");
    await sync.close();
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(title('keys that differ only in lone surrogates are one bucket, in Redis and on the node'), async (t) => {
  const server = await startRedis();
  const connection = await connectClient('ioredis', server.port);
  try {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
    // 3 tokens, never refilled. Redis gets keys as UTF-8, where each lone surrogate is U+FFFD.
    const limiter = new SyncedLimiter({
      sync,
      name: 'surrogates',
      limit: { perSecond: 0, burst: 3 },
      creditAfterMs: 0,
    });
    t.true(await sync.flush());
    let admitted = 0;
    for (let round = 0; round < 3; round++) {
      for (const key of ['\ud800', '\udc00', '\ufffd', 'a\ud800'.slice(1)]) {
        for (let i = 0; i < 2; i++) if (limiter.check(key).allowed) admitted++;
      }
      t.true(await sync.flush());
    }
    t.is(admitted, 3);
    await sync.close();
  } finally {
    await connection.close();
    await server.stop();
  }
});

test.serial(title('tokenBucket on two real servers with a SyncedLimiter holds one bucket for both'), async (t) => {
  const server = await startRedis();
  const connections = await Promise.all(clientNames.map((name) => connectClient(name, server.port)));
  // Two "machines", one per client library: the same limiter name, 10 tokens, one more an hour.
  const machines = connections.map((connection) => {
    const sync = new RedisSync({ sendCommand: connection.send, syncMs: 20 });
    const limiter = new SyncedLimiter({ sync, name: 'api', limit: { ...HOURLY, burst: 10 } });
    const middleware = tokenBucket({ limiter, key: () => 'client' });
    return { sync, http: createServer((req, res) => middleware(req, res, () => res.end('ok'))) };
  });
  try {
    // As the README says: wait until the sync is ready before serving.
    await Promise.all(machines.map((m) => m.sync.ready()));
    const ports = await Promise.all(machines.map((m) => listen(m.http)));
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++) {
      const machine = machines[i % 2] as (typeof machines)[0];
      statuses.push((await get(ports[i % 2] as number)).status);
      // No faster than the syncs: the machine that answered reports this request (and any debt)
      // and takes its next loan in one sync, then tells Redis in the next that it wants no more
      // (Redis shares scarce tokens by each node's last want), all before the next request. So
      // each machine's first request goes on credit, the others on loans, and Redis lends the 10
      // tokens once.
      await syncsAfterNow(machine.sync, 2, `machine ${i % 2} syncs twice after request ${i + 1}`);
    }
    t.deepEqual(statuses, [...Array(10).fill(200), ...Array(10).fill(429)]);
  } finally {
    for (const m of machines) {
      await close(m.http);
      await m.sync.close();
    }
    for (const connection of connections) await connection.close();
    await server.stop();
  }
});

test(title('bad SyncedLimiter options and checks are refused with keepcount error codes'), (t) => {
  const sync = new RedisSync({ sendCommand: async () => [], syncMs: 100 });
  throwsShape(t, () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1 } as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "limit.burst" option must be of type number. Received undefined',
  });
  // A Limiter's quota of dimensions, given where a SyncedLimiter takes its one dimension.
  const oneDimension =
    "(a SyncedLimiter has one dimension: { perSecond, burst } or { amount, periodMs, burst }, not a Limiter's " +
    '{ requests: …, units: … })';
  throwsShape(
    t,
    () => new SyncedLimiter({ sync, name: 'a', limit: { requests: { perSecond: 50, burst: 100 } } as never }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message:
        'The "limit" option must be an object with either perSecond, or amount and periodMs. Received an instance ' +
        `of Object ${oneDimension}`,
    },
  );
  throwsShape(
    t,
    () =>
      new SyncedLimiter({
        sync,
        name: 'a',
        limit: { perSecond: 1, burst: 1 },
        keys: [['k', { units: { amount: 1, periodMs: 1000, burst: 1 } }]] as never,
      }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message:
        'The "keys[0][1]" option must be an object with either perSecond, or amount and periodMs. Received an ' +
        `instance of Object ${oneDimension}`,
    },
  );
  // Nothing that looks like a quota: no hint.
  throwsShape(t, () => new SyncedLimiter({ sync, name: 'a', limit: { burst: 1 } as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message:
      'The "limit" option must be an object with either perSecond, or amount and periodMs. Received an instance of ' +
      'Object',
  });
  throwsShape(t, () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 1 }, leaseMs: 50 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "leaseMs" option must be an integer in [101, 7200000]. Received 50',
  });
  throwsShape(
    t,
    () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 1 }, keys: [[1, {}]] as never }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "keys\[0\]" option must be a \[string, RateLimit\] pair/,
    },
  );
  throwsShape(
    t,
    () =>
      new SyncedLimiter({
        sync,
        name: 'a',
        limit: { perSecond: 1, burst: 1 },
        keys: new Proxy(new Map([['k', { perSecond: 1, burst: 1 }]]), {}) as never,
      }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "keys" option must be an iterable of \[key, RateLimit\] pairs/,
    },
  );
  throwsShape(
    t,
    () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 1 }, failPolicy: 'x' as never }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "failPolicy" option must be one of 'local', 'open', 'closed'/,
    },
  );
  throwsShape(t, () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 1 }, creditAfterMs: -1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "creditAfterMs" option must be an integer in [0, 3600000]. Received -1',
  });
  throwsShape(
    t,
    () => new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 1 }, creditAfterMs: '5' as never }),
    {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: /^The "creditAfterMs" option must be of type number/,
    },
  );
  const limiter = new SyncedLimiter({ sync, name: 'a', limit: { perSecond: 1, burst: 2 } });
  t.is(limiter.creditAfterMs, sync.syncMs, 'credit waits a sync period by default');
  throwsShape(t, () => limiter.check('k', -1), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "cost" argument must be a safe integer >= 0. Received -1',
  });
  throwsShape(t, () => limiter.check(1 as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "key" argument must be of type string. Received 1',
  });
  t.deepEqual(limiter.check('k', 3), { allowed: false, retryAfterMs: Infinity }, 'a cost above the burst never passes');
  void sync.close();
});
