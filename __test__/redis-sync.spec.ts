/**
 * RedisSync's contract with its sender and its callers, on senders written here (no Redis needed):
 * a wrong reply or a throwing sender fails the sync and never the caller, close() may be called
 * twice, bad options and a second structure of one kind and name are refused with keepcount codes.
 */
import test from 'ava';
import {
  RedisSync,
  SyncedEstimator,
  SyncedInflight,
  SyncedLimiter,
  SyncedRate,
  SyncedWindowQuota,
} from '../lib/redis/index.js';
import { throwsShape, title } from './helpers.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

test(
  title('a reply that is not the script’s fails the sync with ERR_KEEPCOUNT_SYNC and changes nothing'),
  async (t) => {
    for (const reply of [[], 'OK', [1, 2, 'i', 1, 1, 5], [1, 2, 'i', 1, 0, 'extra']]) {
      const sync = new RedisSync({ sendCommand: async () => reply, syncMs: 3_600_000 });
      const errors: Error[] = [];
      sync.on('error', (error: Error) => errors.push(error));
      const sketch = new SyncedEstimator({ sync, name: 'bad', seed: 7 });
      sketch.incr('k', 2);
      t.false(await sync.flush());
      t.is(sketch.get('k'), 2);
      t.is(sync.nodes, 1);
      t.like(errors[0], { code: 'ERR_KEEPCOUNT_SYNC', message: 'Unexpected reply from the keepcount sync script' });
      await sync.close();
    }
  },
);

test(title('close() called twice resolves both calls once the last sync is done, with its result'), async (t) => {
  const replied: string[] = [];
  const sync = new RedisSync({
    sendCommand: async () => {
      await sleep(50);
      replied.push('reply');
      throw new Error('no connection');
    },
    syncMs: 3_600_000,
  });
  const sketch = new SyncedEstimator({ sync, name: 'close-twice', seed: 7 });
  sketch.incr('k');
  // As two shutdown hooks would: the process may exit once either resolves.
  const [first, second] = await Promise.all([sync.close(), sync.close().then((ok) => [ok, replied.length])]);
  t.false(first);
  t.deepEqual(second, [false, 1]);
});

test(title('a sender that throws synchronously fails the sync, never the caller'), async (t) => {
  const sync = new RedisSync({
    sendCommand: () => {
      throw new Error('no connection');
    },
    syncMs: 3_600_000,
  });
  const sketch = new SyncedEstimator({ sync, name: 'throws', seed: 7 });
  t.is(sketch.incr('k'), 1);
  t.false(await sync.flush());
  t.is(sync.stats.failures, 1);
  await sync.close();
});

test(title('bad options are refused with keepcount error codes'), (t) => {
  throwsShape(t, () => new RedisSync({ sendCommand: 'no' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "sendCommand" option must be of type function. Received type string ("no")',
  });
  throwsShape(t, () => new RedisSync({ sendCommand: async () => [], cluster: 'yes' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "cluster" option must be of type boolean. Received type string ("yes")',
  });
  const sync = new RedisSync({ sendCommand: async () => [] });
  throwsShape(t, () => new SyncedEstimator({ sync, name: 'a{b}', seed: 1 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "name" option must be a non-empty string without { or }. Received type string ("a{b}")',
  });
  throwsShape(t, () => new SyncedEstimator({ sync: {} as never, name: 'a', seed: 1 }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "sync" option must be an instance of RedisSync. Received an instance of Object',
  });
  throwsShape(t, () => new SyncedRate({ sync, name: 'a', seed: 1, intervalMs: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "intervalMs" option must be/,
  });
  void sync.close();
});

test(
  title('a second structure of one kind and name on one RedisSync is refused, even once the first is closed'),
  (t) => {
    // Both would push into this node's one contribution in Redis: one's counts would be lost.
    const sync = new RedisSync({ sendCommand: async () => [], syncMs: 3_600_000 });
    const seed = 7;
    const limit = { perSecond: 1, burst: 1 };
    const first = new SyncedEstimator({ sync, name: 'once', seed });
    const again = (kind: string, make: () => unknown) =>
      throwsShape(t, make, {
        instanceOf: Error,
        code: 'ERR_KEEPCOUNT_DUPLICATE_KEY',
        message:
          `A ${kind} named "once" was already made on this RedisSync: its counts in Redis are this node's, ` +
          'and a second one would overwrite them. Share the first, or give the second its own RedisSync',
      });
    again('SyncedEstimator', () => new SyncedEstimator({ sync, name: 'once', seed }));
    first.close();
    again('SyncedEstimator', () => new SyncedEstimator({ sync, name: 'once', seed }));
    // Other kinds of the same name keep keys of their own.
    new SyncedWindowQuota({ sync, name: 'once', seed, limit: 1, windowMs: 1000 }).close();
    again('SyncedRate (or SyncedWindowQuota)', () => new SyncedRate({ sync, name: 'once', seed, intervalMs: 1000 }));
    new SyncedInflight({ sync, name: 'once', seed }).close();
    again('SyncedInflight', () => new SyncedInflight({ sync, name: 'once', seed }));
    new SyncedLimiter({ sync, name: 'once', limit }).close();
    again('SyncedLimiter', () => new SyncedLimiter({ sync, name: 'once', limit }));
    // Another sync is another node, with a contribution of its own.
    const other = new RedisSync({ sendCommand: async () => [], syncMs: 3_600_000 });
    new SyncedEstimator({ sync: other, name: 'once', seed }).close();
    void sync.close();
    void other.close();
  },
);
