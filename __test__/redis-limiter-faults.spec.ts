/**
 * keepcount/redis' SyncedLimiter's loans under network faults, against a real redis-server: a
 * reply a dropped connection lost (the client sends the script again), a reply that comes after
 * its sync gave up, and a closed limiter's leave through a failed sync and a lost reply. Each
 * token is admitted once, never lost, never twice.
 */
import test from 'ava';
import { RedisSync, SyncedLimiter } from '../lib/redis/index.js';
import { title } from './helpers.js';
import { clientNames, connectClient } from './redis-clients.js';
import { startReplyCutter } from './redis-proxy.js';
import { startRedis } from '../tools/redis-server.js';
import { HOURLY } from './redis-refill.js';

/** A sync whose timer never fires within a test: the spec flushes by hand, in an order it chooses. */
const BY_HAND = 60_000;

test.serial(
  title('a sync whose reply a dropped connection lost, sent again by the client: its loan comes back once'),
  async (t) => {
    // ioredis sends a command again after reconnecting: Redis runs the script twice with one
    // sequence number, and the second run (not applied, nothing lent) is the reply the node sees.
    // node-redis rejects the command instead: the sync fails, as when it times out.
    for (const client of clientNames) {
      const server = await startRedis();
      const cutter = await startReplyCutter(server.port);
      const connection = await connectClient(client, cutter.port);
      try {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, timeoutMs: 2000 });
        sync.on('error', () => undefined);
        // 10 tokens that never refill: a loan lost for good is a token never admitted.
        const limiter = new SyncedLimiter({
          sync,
          name: 'cut-reply',
          limit: { perSecond: 0, burst: 10 },
          creditAfterMs: 0,
        });
        let admitted = 0;
        const check = (n: number): void => {
          for (let i = 0; i < n; i++) if (limiter.check('k').allowed) admitted++;
        };
        t.true(await sync.flush());
        check(1);
        t.true(await sync.flush());
        check(1);
        cutter.cutNextReply();
        await sync.flush();
        t.is(cutter.cuts, 1);
        for (let round = 0; round < 6; round++) {
          check(12);
          t.true(await sync.flush(), client);
        }
        t.is(admitted, 10, `${client}: every token, once`);
        await sync.close();
      } finally {
        await connection.close();
        await cutter.close();
        await server.stop();
      }
    }
  },
);

test.serial(
  title("a closed limiter's leave survives a failed sync and a lost reply: its debt is paid, once"),
  async (t) => {
    const server = await startRedis();
    const connection = await connectClient('ioredis', server.port);
    try {
      // The link fails the next call outright ('fail') or runs it and loses the reply ('lose').
      let fault: 'fail' | 'lose' | undefined;
      const send = async (args: string[]): Promise<unknown> => {
        const now = fault;
        fault = undefined;
        if (now === 'fail') throw new Error('connection reset');
        const reply = await connection.send(args);
        if (now === 'lose') throw new Error('reply lost');
        return reply;
      };
      const tokens = async (name: string): Promise<number> =>
        Number(await connection.send(['HGET', `keepcount:{${name}}:b:k`, 't']));
      for (const [name, faults] of [
        ['leave-fail', ['fail']],
        ['leave-lose', ['lose']],
        ['leave-both', ['lose', 'fail', 'lose']],
      ] as const) {
        const sync = new RedisSync({ sendCommand: send, syncMs: BY_HAND });
        sync.on('error', () => undefined);
        // 100 tokens, one more an hour: a debt forgiven or paid twice shows for good.
        const limiter = new SyncedLimiter({ sync, name, limit: { ...HOURLY, burst: 100 }, creditAfterMs: 0 });
        t.true(await sync.flush());
        let admitted = 0;
        for (let i = 0; i < 60; i++) if (limiter.check('k').allowed) admitted++;
        t.is(admitted, 60, 'on credit: the node owes 60');
        limiter.close();
        for (const next of faults) {
          fault = next;
          t.false(await sync.flush(), `${name}: the leave's sync fails (${next})`);
        }
        t.true(await sync.close(), `${name}: the leave goes with the last sync`);
        t.is(await tokens(name), 40, `${name}: the bucket paid the debt of 60, once`);
      }
    } finally {
      await connection.close();
      await server.stop();
    }
  },
);

test.serial(
  title('a loan whose reply comes after its sync timed out goes back to the bucket: admitted once, never twice'),
  async (t) => {
    for (const client of clientNames) {
      const server = await startRedis();
      const connection = await connectClient(client, server.port);
      try {
        const sync = new RedisSync({ sendCommand: connection.send, syncMs: BY_HAND, timeoutMs: 100 });
        sync.on('error', () => undefined);
        // 10 tokens that never refill: whatever is lost stays lost, whatever is admitted twice shows.
        const limiter = new SyncedLimiter({
          sync,
          name: 'late-loan',
          limit: { perSecond: 0, burst: 10 },
          creditAfterMs: 0,
        });
        let admitted = 0;
        const check = (): void => {
          if (limiter.check('k').allowed) admitted++;
        };
        t.true(await sync.flush());
        check();
        t.true(await sync.flush(), 'a loan of 2: the debt and the demand');
        server.pause();
        check();
        // Both ask Redis for one token, give up, and are applied once Redis runs again.
        t.deepEqual([await sync.flush(), await sync.flush()], [false, false], client);
        server.resume();
        for (let round = 0; round < 10; round++) {
          for (let i = 0; i < 12; i++) check();
          t.true(await sync.flush(), client);
        }
        t.is(admitted, 10, `${client}: the 2 tokens lent to syncs that had timed out are admitted, once`);
        await sync.close();
      } finally {
        await connection.close();
        await server.stop();
      }
    }
  },
);
