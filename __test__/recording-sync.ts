/**
 * A `RedisSync` that reaches no Redis: every command it would send is recorded in `sent` and
 * fails, so tests can read what a sync carries without a server. Syncs run only by hand
 * (`flush()`, `close()`), and their failures are heard so that none is thrown from a timer.
 */
import { RedisSync } from '../lib/redis/index.js';

export function recordingSync(sent: string[][]): RedisSync {
  const sync = new RedisSync({
    sendCommand: async (args) => {
      sent.push(args);
      throw new Error('recorded, not sent');
    },
    syncMs: 3_600_000,
  });
  sync.on('error', () => {});
  return sync;
}
