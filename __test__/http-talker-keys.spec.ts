// Client keys that reach heavy-hitter tables (a rate limit's exact counts, the `talkers` of
// tokenBucket and upstreamLimit) are stored in a bounded form: long keys cannot make the tables
// large, and still show in topTalkers, recognisably and exactly counted.
import { createHash } from 'node:crypto';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import Fastify from 'fastify';
import { HeavyHitters, Limiter } from '../lib/index.js';
import {
  MAX_TALKER_KEY_LENGTH,
  rateLimit,
  talkerKey,
  tokenBucket,
  upstreamLimit,
  WindowQuota,
  type Middleware,
  type Talkers,
} from '../lib/http/index.js';
import { rateLimitHook, tokenBucketHook, upstreamLimitHook } from '../lib/http/fastify.js';
import { runFixture, title } from './helpers.js';
import { close, listen } from './http-client.js';

const WINDOW_MS = 3_600_000;
const HEADER = 'x-api-key';
/** Room for a 16 kB key header: Node's default of 16 KiB for all headers is too small. */
const MAX_HEADER_SIZE = 65_536;

/** The bounded form, computed here from its definition rather than by the helper under test. */
function expectedForm(key: string): string {
  const digest = createHash('sha256').update(key).digest('hex').slice(0, 16);
  return `${key.slice(0, 240)}…${digest}`;
}

/** One request carrying `key` in the header, on its own connection; resolves with the status. */
function send(port: number, key: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, agent: false, headers: { [HEADER]: key } }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

// Two long keys sharing their first 240 characters (so only the digest tells them apart), one of
// exactly the longest length stored as it is, and a short one, each sent a different number of times.
const prefix = 'k'.repeat(240);
const KEYS = [
  { key: prefix + 'a'.repeat(16_000 - 240), sends: 5 },
  { key: prefix + 'b'.repeat(16_000 - 240), sends: 3 },
  { key: 'm'.repeat(MAX_TALKER_KEY_LENGTH), sends: 2 },
  { key: 'client-1', sends: 1 },
];
/** Requests allowed per key: the first long key goes one over it. */
const LIMIT = 4;

/** Talkers with threshold 1: every key is counted exactly from its first request. */
const exactTalkers = (): HeavyHitters => new HeavyHitters({ intervalMs: WINDOW_MS, threshold: 1 });
const rateOptions = { limit: LIMIT, windowMs: WINDOW_MS, heavyHitters: { threshold: 1 } };
const limiter = (): Limiter => new Limiter({ bestEffort: { requests: { perSecond: 1e6, burst: 1e6 } } });

/** A server per adapter, limiting by the header through all three limiters. */
const adapters: Record<string, () => Promise<{ port: number; lists: Talkers[]; stop: () => Promise<void> }>> = {
  'node:http': async () => {
    const key = (req: IncomingMessage): string => String(req.headers[HEADER]);
    const chain: (Middleware & Talkers)[] = [
      rateLimit({ ...rateOptions, key }),
      tokenBucket({ limiter: limiter(), key, talkers: exactTalkers() }),
      upstreamLimit({ max: 1_000_000, upstream: key, talkers: exactTalkers() }),
    ];
    const server = createServer({ maxHeaderSize: MAX_HEADER_SIZE }, (req, res) => {
      const run = (at: number): void => {
        if (at === chain.length) return void res.end('admitted');
        chain[at]!(req, res, (error) => (error === undefined ? run(at + 1) : res.destroy(error as Error)));
      };
      run(0);
    });
    const port = await listen(server);
    return { port, lists: chain, stop: () => close(server) };
  },
  Fastify: async () => {
    const key = (r: { raw: IncomingMessage }): string => String(r.raw.headers[HEADER]);
    const hooks = [
      rateLimitHook({ ...rateOptions, key }),
      tokenBucketHook({ limiter: limiter(), key, talkers: exactTalkers() }),
      upstreamLimitHook({ max: 1_000_000, upstream: key, talkers: exactTalkers() }),
    ];
    const app = Fastify({ http: { maxHeaderSize: MAX_HEADER_SIZE } });
    app.get('/', { onRequest: hooks }, async () => 'admitted');
    await app.listen({ port: 0, host: '127.0.0.1' });
    return { port: (app.server.address() as AddressInfo).port, lists: hooks, stop: () => app.close() };
  },
};

for (const [name, start] of Object.entries(adapters)) {
  test(
    title(`${name}: long keys are listed in their bounded form with exact counts, short keys as sent`),
    async (t) => {
      const { port, lists, stop } = await start();
      t.teardown(stop);
      const statuses: Record<string, number[]> = {};
      for (const { key, sends } of KEYS) {
        statuses[key] = [];
        for (let i = 0; i < sends; i++) statuses[key].push(await send(port, key));
      }
      // The limit counts each long key on its own: the first is refused on its fifth request only,
      // the second (same first 240 characters) never.
      t.deepEqual(statuses[KEYS[0]!.key], [200, 200, 200, 200, 429]);
      t.deepEqual(statuses[KEYS[1]!.key], [200, 200, 200]);
      // The refused request never reached tokenBucket and upstreamLimit.
      const counted = [KEYS.map((k) => k.sends), KEYS.map((k, i) => (i === 0 ? LIMIT : k.sends))];
      for (const [i, list] of lists.entries()) {
        const sends = counted[i === 0 ? 0 : 1]!;
        const expected = KEYS.map(({ key }, j) => ({
          key: key.length > MAX_TALKER_KEY_LENGTH ? expectedForm(key) : key,
          lower: sends[j]!,
          upper: sends[j]!,
        })).sort((a, b) => b.upper - a.upper);
        t.deepEqual(list.topTalkers(10), expected, `limiter ${i}`);
      }
      t.is(expectedForm(KEYS[0]!.key).length, 257);
    },
  );
}

test(title('a flood of distinct 16 kB keys adds memory bounded by the key form, not the key'), async (t) => {
  t.timeout(180_000);
  for (const adapter of ['node', 'fastify']) {
    const child = await runFixture('long-key-flood.ts', { nodeArgs: ['--expose-gc'], args: [adapter, '2000'] });
    t.is(child.code, 0, child.stderr);
    const { heapAdded, rssAdded, listed, longestListed } = JSON.parse(child.stdout) as {
      heapAdded: number;
      rssAdded: number;
      listed: number[];
      longestListed: number;
    };
    t.log(`${adapter}: heap +${(heapAdded / 1e6).toFixed(1)} MB, RSS +${(rssAdded / 1e6).toFixed(1)} MB`);
    t.deepEqual(listed, [2000, 2000, 2000], `${adapter}: every key took an entry in every table`);
    t.is(longestListed, 257);
    // The 6,000 entries holding whole keys would add 96 MB (3 tables × 2,000 × 16,000 bytes): before
    // the bounded form, measured +48–63 MB RSS native and +113 MB heap fallback at 1,000 keys. With
    // it, at 2,000 keys (2-core x64, Node 20, 2026-11-25): heap at most +8.6 MB (fallback), RSS at
    // most +21 MB (Fastify's buffers, either backend). The bounds are half the unbounded cost.
    t.true(heapAdded < 32e6, `${adapter}: heap +${heapAdded} bytes`);
    t.true(rssAdded < 48e6, `${adapter}: RSS +${rssAdded} bytes`);
  }
});

test(title('talkerKey keeps keys up to 256 code units and bounds longer ones to 257'), (t) => {
  const short = 'x'.repeat(MAX_TALKER_KEY_LENGTH);
  t.is(talkerKey(short), short);
  t.is(talkerKey(''), '');
  const long = 'x'.repeat(MAX_TALKER_KEY_LENGTH + 1);
  t.is(talkerKey(long), expectedForm(long));
  t.not(talkerKey(long), talkerKey(long + 'y'));
  // A surrogate pair cut in half: the lone high surrogate is shown as U+FFFD, as both backends
  // would store it; the digest covers the whole key.
  const emoji = 'x'.repeat(239) + '😀' + 'y'.repeat(100);
  const form = talkerKey(emoji);
  t.is(form.length, 257);
  t.is(form, 'x'.repeat(239) + '\uFFFD…' + expectedForm(emoji).slice(-16));
  // Not a string: passed through for the counter to check.
  t.is(talkerKey(42 as unknown as string), 42 as unknown as string);
});

test(title('a WindowQuota counts, adjusts and reads a long key under its bounded form'), (t) => {
  const quota = new WindowQuota({ limit: 3, windowMs: WINDOW_MS, heavyHitters: { threshold: 1 } });
  const long = 'z'.repeat(20_000);
  t.is(quota.consume(long).count, 1);
  t.is(quota.consume(long).key, long, 'the decision names the key as given');
  quota.adjust(long, -1);
  t.deepEqual(quota.current(long).count, 1);
  t.is(quota.count(long, 0).count, 1);
  t.deepEqual(quota.topTalkers(5), [{ key: expectedForm(long), lower: 1, upper: 1 }]);
});
