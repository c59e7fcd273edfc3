/**
 * keepcount/redis' SyncedLimiter under a flood of distinct keys against a real redis-server: the
 * 65,536 accounts a node keeps, the room debts make for new keys, and the keys in use asked for
 * first.
 */
import test from 'ava';
import { RedisSync, SyncedLimiter } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { connectClient } from './redis-clients.js';
import { sleep } from './waits.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';

test.serial(
  title('a node keeps at most 65,536 keys: a new one past that waits while the oldest owes tokens'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // No sync after the first: no key ever leaves, as while Redis is away.
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      const limit = { perSecond: 1, burst: 10 };
      const owing = new SyncedLimiter({ sync, name: 'owing', limit, creditAfterMs: 0 });
      const even = new SyncedLimiter({ sync, name: 'even', limit, creditAfterMs: 0 });
      t.true(await sync.flush());
      t.true(owing.check('first').allowed, 'on credit: it owes a token');
      t.true(even.check('first', 0).allowed, 'costs nothing: it owes nothing');
      for (let i = 1; i < 65_536; i++) {
        owing.check(`k${i}`, 0);
        even.check(`k${i}`, 0);
      }
      t.deepEqual(owing.check('one more'), { allowed: false, retryAfterMs: 3_600_000 });
      t.true(even.check('one more').allowed, 'the oldest key made room');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title(
    'past 65,536 keys a flood of distinct keys makes room for new keys as debts are paid, evenly, never a client in use',
  ),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      // 10 tokens per key, one more an hour: a client made room for would come back to 10 more on credit.
      const limiter = new SyncedLimiter({ sync, name: 'churn', limit: { ...HOURLY, burst: 10 }, creditAfterMs: 0 });
      // The limiter's sync periods begin when a sync asks for loans, inside flush(): these
      // readings bound those instants, so that the shares below are bounds too.
      const firstAsked = performance.now();
      t.true(await sync.flush());
      const firstDone = performance.now();
      // A flood of 65,534 keys checked once each, on credit (each owes a token), then a client that
      // spends its credit and is refused.
      for (let i = 0; i < 65_534; i++) t.true(limiter.check(`flood-${i}`).allowed);
      for (let i = 0; i < 10; i++) t.true(limiter.check('client').allowed);
      t.false(limiter.check('client').allowed);
      // The next sync, a period of 1 s after the first: the client first (refused), then the 1,023
      // oldest flooding keys; each loan pays a debt. The oldest account left still owes.
      await sleep(1000 - (performance.now() - firstDone));
      const paidAt = performance.now();
      t.true(await sync.flush());
      const paidDone = performance.now();
      t.false(limiter.check('client').allowed, 'its bucket is spent');
      // New keys: the 65,536th has room; each later one may take the place of a flooding key whose
      // debt was paid, but no faster than that room is handed out over the period: a burst of
      // new keys right after the sync gets the share of it the time since then allows.
      let admitted = 0;
      let next = 0;
      const newKeys = (n: number): void => {
        for (const end = next + n; next < end; next++) {
          const decision = limiter.check(`new-${next}`);
          if (decision.allowed) admitted++;
          else t.deepEqual(decision, { allowed: false, retryAfterMs: 3_600_000 });
        }
      };
      newKeys(1_100);
      const share = (performance.now() - paidAt) / (paidAt - firstDone);
      t.true(admitted <= 1 + Math.ceil(1_023 * share), `${admitted} admitted ${share} into the period`);
      // A period later, all of it, and no more.
      await sleep(paidDone - firstAsked - (performance.now() - paidDone) + 10);
      newKeys(1_100);
      t.is(admitted, 1 + 1_023);
      t.false(limiter.check('client').allowed, 'still known: no fresh credit');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title("a key made room for and asked for again: Redis never gives back its earlier account's last loan"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const sync = new RedisSync({ sendCommand: connection.send, syncMs: 3_600_000 });
      // 10 tokens, one more an hour: a loan given back twice is an eleventh admission.
      const limiter = new SyncedLimiter({ sync, name: 'again', limit: { ...HOURLY, burst: 10 }, creditAfterMs: 0 });
      let admitted = 0;
      const check = (): void => {
        if (limiter.check('k').allowed) admitted++;
      };
      t.true(await sync.flush());
      check(); // on credit
      t.true(await sync.flush()); // lent 2: the debt and the demand
      check();
      t.true(await sync.flush()); // lent 1, which Redis records as this node's last loan
      check(); // ...and spent: 3 admitted, 7 tokens left in Redis
      t.is(admitted, 3);
      // 65,535 more keys that owe nothing fill the table behind k; one more makes k's account go.
      for (let i = 1; i < 65_536; i++) limiter.check(`o${i}`, 0);
      limiter.check('x', 0);
      check(); // a new account for k, on credit again (one token: more would be the nodes' credit)
      // Its first request waits for the other keys' turns, 1,024 a sync: then it has a loan, and
      // no more credit; what it admits after comes from the bucket.
      for (let i = 0; i < 64; i++) t.true(await sync.flush());
      for (let i = 0; i < 2 * 64; i++) {
        for (let j = 0; j < 3; j++) check();
        t.true(await sync.flush());
      }
      t.is(admitted, 10, 'every token of the bucket, once');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('under a flood of distinct keys, a key that needs tokens is asked for first and is not refused'),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      const asked: string[][] = [];
      const sync = new RedisSync({
        sendCommand: (args) => {
          asked.push(args.filter((arg) => arg.startsWith('keepcount:{flooded}:b:')));
          return connection.send(args);
        },
        syncMs: 3_600_000,
      });
      // A burst of 4 and 1 a second: alone on the node, a new key may take 4 on credit.
      const limiter = new SyncedLimiter({ sync, name: 'flooded', limit: { perSecond: 1, burst: 4 }, creditAfterMs: 0 });
      t.true(await sync.flush());
      // 3,000 keys checked once, on credit: a sync asks for 1,024 of them.
      for (let i = 0; i < 3000; i++) t.true(limiter.check(`flood-${i}`).allowed);
      // A client arriving after them, past half its credit: it needs a loan now.
      for (let i = 0; i < 3; i++) t.true(limiter.check('client').allowed);
      asked.length = 0;
      t.true(await sync.flush());
      const first = asked.flat();
      t.is(first.length, 1024);
      t.is(first[0], 'keepcount:{flooded}:b:client', 'asked for first, ahead of 3,000 flooding keys');
      // Its loan came (its debt of 3 and its demand): the fourth check spends its last credit
      // or the loan, and the client goes on being admitted while the flood waits its turn.
      t.true(limiter.check('client').allowed);
      // The flooding keys are asked for in turn over the next syncs.
      const turns: string[] = [];
      for (let i = 0; i < 2; i++) {
        asked.length = 0;
        t.true(await sync.flush());
        turns.push(...asked.flat());
      }
      t.is(new Set([...first, ...turns]).size, 3001, 'every flooding key asked for within three syncs');
      await sync.close();
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);
