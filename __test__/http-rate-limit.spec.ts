/**
 * rateLimit and tokenBucket on real HTTP servers (plain node:http and Express) with a real client:
 * refusals with RateLimit headers and Retry-After, client keys (X-Forwarded-For trust, IPv6
 * prefixes, ipKey), skip rules and custom handlers, and no 429 for clients within their limit under
 * a flood.
 */
import test from 'ava';
import { Agent, createServer, request } from 'node:http';
import { Limiter, ManualClock } from '../lib/index.js';
import { ipKey, rateLimit, tokenBucket, upstreamLimit } from '../lib/http/index.js';
import { rateLimitHook, tokenBucketHook, upstreamLimitHook } from '../lib/http/fastify.js';
import { title } from './helpers.js';
import { close, get, limitFields, listen, parseField } from './http-client.js';
import { frameworks, ok } from './http-frameworks.js';

for (const [name, serve] of Object.entries(frameworks)) {
  test(
    title(`${name}: refuses past the limit with RateLimit headers, Retry-After, and again allows after the window`),
    async (t) => {
      const clock = new ManualClock();
      const server = serve([rateLimit({ limit: 3, windowMs: 60_000, clock })], ok);
      const port = await listen(server);
      t.teardown(() => close(server));

      const replies = [];
      for (let i = 0; i < 5; i++) replies.push(await get(port));
      t.deepEqual(
        replies.map((r) => r.status),
        [200, 200, 200, 429, 429],
      );
      for (const [i, r] of replies.entries()) {
        t.deepEqual(parseField(r.headers['ratelimit-policy']), { name: 'default', params: { q: 3, w: 60 } });
        t.deepEqual(parseField(r.headers.ratelimit), { name: 'default', params: { r: Math.max(0, 2 - i), t: 60 } });
      }
      t.is(replies[0]!.headers['retry-after'], undefined);
      t.is(replies[3]!.headers['retry-after'], '60');
      t.is(replies[3]!.body, 'Too Many Requests\n');

      clock.advance(45_000);
      const late = await get(port);
      t.is(late.status, 429);
      t.is(parseField(late.headers.ratelimit).params.t, 15);
      t.is(late.headers['retry-after'], '15');

      clock.advance(15_000);
      const next = await get(port);
      t.is(next.status, 200);
      t.is(parseField(next.headers.ratelimit).params.r, 2);
    },
  );

  test(
    title(`${name}: with the default heavy hitters, RateLimit's r only falls in a window and is 0 by the 429`),
    async (t) => {
      // limit 100, threshold 25: r once read 76 at the 24th request and 99 at the 25th, when the
      // client entered the exact table, then fell to 0 at the 124th. One client alone: its upper
      // bound is its true count, so r is 100 − n; requests up to limit + threshold − 1 pass.
      const clock = new ManualClock();
      const server = serve([rateLimit({ limit: 100, windowMs: 60_000, clock })], ok);
      const port = await listen(server);
      t.teardown(() => close(server));

      const seen: string[] = [];
      let last = Infinity;
      let firstRefusal: number | undefined;
      for (let n = 1; n <= 130; n++) {
        const reply = await get(port);
        const { r } = parseField(reply.headers.ratelimit).params as { r: number };
        seen.push(`${n}:${reply.status} r=${r}`);
        t.true(r <= last, `r rose from ${last} to ${r} at request ${n}`);
        last = r;
        if (reply.status === 429) firstRefusal ??= n;
        if (firstRefusal !== undefined) t.is(r, 0, `r=${r} at request ${n}, after the first 429`);
      }
      t.is(firstRefusal, 125);
      t.deepEqual(
        seen,
        Array.from({ length: 130 }, (_, i) => `${i + 1}:${i < 124 ? 200 : 429} r=${Math.max(0, 99 - i)}`),
      );

      clock.advance(60_000);
      t.is(parseField((await get(port)).headers.ratelimit).params.r, 99, 'a new window starts afresh');
    },
  );

  test(title(`${name}: headers: false sends no RateLimit fields, and Retry-After on refusals only`), async (t) => {
    const clock = new ManualClock();
    const server = serve([rateLimit({ limit: 1, windowMs: 60_000, clock, headers: false })], ok);
    const port = await listen(server);
    t.teardown(() => close(server));

    const [first, second] = [await get(port), await get(port)];
    t.deepEqual([first.status, second.status], [200, 429]);
    t.deepEqual([first, second].map(limitFields), [
      { policy: undefined, rateLimit: undefined, retryAfter: undefined },
      { policy: undefined, rateLimit: undefined, retryAfter: '60' },
    ]);
    t.is(second.body, 'Too Many Requests\n');
  });

  test(title(`${name}: ignores X-Forwarded-For unless trusted, then believes exactly the trusted hops`), async (t) => {
    const clock = new ManualClock();
    const untrusted = serve([rateLimit({ limit: 1, windowMs: 1000, clock })], ok);
    const oneHop = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1 })], ok);
    const byFn = serve(
      [rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: (ip) => ip === '127.0.0.1' || ip === '10.0.0.1' })],
      ok,
    );
    const ports = await Promise.all([untrusted, oneHop, byFn].map(listen));
    t.teardown(() => Promise.all([untrusted, oneHop, byFn].map(close)));
    const [u, o, f] = ports as [number, number, number];

    // Untrusted: a client rotating X-Forwarded-For is still one client.
    t.is((await get(u, '/', { 'x-forwarded-for': '203.0.113.1' })).status, 200);
    t.is((await get(u, '/', { 'x-forwarded-for': '203.0.113.2' })).status, 429);

    // One trusted hop: the last entry is the client; what the client prepended is ignored.
    t.is((await get(o, '/', { 'x-forwarded-for': '198.51.100.9, 203.0.113.1' })).status, 200);
    t.is((await get(o, '/', { 'x-forwarded-for': '198.51.100.8, 203.0.113.1' })).status, 429);
    t.is((await get(o, '/', { 'x-forwarded-for': '203.0.113.2' })).status, 200);
    // Garbage instead of an address keys the request by the proxy, not by the garbage.
    t.is((await get(o, '/', { 'x-forwarded-for': 'not-an-ip' })).status, 200);
    t.is((await get(o, '/', { 'x-forwarded-for': 'also-not' })).status, 429);

    // A trust function walks back through trusted proxies: 10.0.0.1 is one, 203.0.113.5 the client.
    t.is((await get(f, '/', { 'x-forwarded-for': '203.0.113.5, 10.0.0.1' })).status, 200);
    t.is((await get(f, '/', { 'x-forwarded-for': '198.51.100.1, 203.0.113.5, 10.0.0.1' })).status, 429);
    t.is((await get(f, '/', { 'x-forwarded-for': '203.0.113.6, 10.0.0.1' })).status, 200);
  });

  test(
    title(`${name}: keys IPv6 clients by their /56 (or the configured prefix) and IPv4-mapped ones as IPv4`),
    async (t) => {
      const clock = new ManualClock();
      const by56 = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1 })], ok);
      const by64 = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1, ipv6Subnet: 64 })], ok);
      const whole = serve([rateLimit({ limit: 1, windowMs: 1000, clock, trustProxy: 1, ipv6Subnet: false })], ok);
      const [p56, p64, pAll] = (await Promise.all([by56, by64, whole].map(listen))) as [number, number, number];
      t.teardown(() => Promise.all([by56, by64, whole].map(close)));
      const status = async (port: number, ip: string) => (await get(port, '/', { 'x-forwarded-for': ip })).status;

      t.is(await status(p56, '2001:db8:1:2::1'), 200);
      t.is(await status(p56, '2001:db8:1:2::2'), 429, 'another address of the same /64');
      t.is(await status(p56, '2001:db8:1:ff:abcd::9'), 429, 'another /64 of the same /56');
      t.is(await status(p56, '2001:DB8:0001:0002:0:0:0:3'), 429, 'another spelling of the same /56');
      t.is(await status(p56, '2001:db8:1:100::1'), 200, 'the next /56 is another client');

      t.is(await status(p56, '::ffff:203.0.113.7'), 200);
      t.is(await status(p56, '::ffff:cb00:7107'), 429, 'the same IPv4 client in hexadecimal');
      t.is(await status(p56, '203.0.113.7'), 429, 'and in plain IPv4');
      t.is(await status(p56, '::ffff:203.0.113.8'), 200, 'IPv4-mapped clients are not lumped into one prefix');

      t.is(await status(p64, '2001:db8:1:2::1'), 200);
      t.is(await status(p64, '2001:db8:1:2:ffff::1'), 429);
      t.is(await status(p64, '2001:db8:1:3::1'), 200, 'ipv6Subnet: 64 tells /64s apart');

      t.is(await status(pAll, '2001:db8:1:2::1'), 200);
      t.is(await status(pAll, '2001:db8:1:2:0:0:0:1'), 429, 'the same address spelled out');
      t.is(await status(pAll, '2001:db8:1:2::2'), 200, 'ipv6Subnet: false keys whole addresses');
    },
  );

  test(title(`${name}: skip rules pass requests uncounted and a custom handler answers refusals`), async (t) => {
    const clock = new ManualClock();
    const server = serve(
      [
        rateLimit({
          limit: 1,
          windowMs: 1000,
          clock,
          key: (req) => String(req.headers['x-client']),
          skip: (req) => req.url === '/health',
          onLimit: (_req, res, decision) => {
            res.statusCode = 418;
            res.end(`slow down ${decision.key}: ${decision.count}/${decision.limit}`);
          },
        }),
      ],
      ok,
    );
    const port = await listen(server);
    t.teardown(() => close(server));

    for (let i = 0; i < 3; i++) {
      const health = await get(port, '/health', { 'x-client': 'a' });
      t.is(health.status, 200);
      t.is(health.headers.ratelimit, undefined);
    }
    t.is((await get(port, '/', { 'x-client': 'a' })).status, 200);
    const refused = await get(port, '/', { 'x-client': 'a' });
    t.is(refused.status, 418);
    t.is(refused.body, 'slow down a: 2/1');
    t.is(refused.headers['retry-after'], '1');
    t.is((await get(port, '/', { 'x-client': 'b' })).status, 200);
  });
}

test(title('ipKey keys addresses as express-rate-limit v8 and validates the prefix'), (t) => {
  t.is(ipKey('2001:db8:1:2::1'), '2001:db8:1::/56');
  t.is(ipKey('2001:db8:1:2ab::1', 64), '2001:db8:1:2ab::/64');
  t.is(ipKey('2001:db8::', 32), '2001:db8::/32');
  t.is(ipKey('fe80::1%eth0', 64), 'fe80::/64');
  t.is(ipKey('2001:DB8:0:0:1:0:0:1', false), '2001:db8::1:0:0:1');
  t.is(ipKey('::ffff:203.0.113.7'), '203.0.113.7');
  t.is(ipKey('::ffff:cb00:7107'), '203.0.113.7');
  t.is(ipKey('0:0:0:0:0:ffff:1.2.3.4', false), '1.2.3.4');
  t.is(ipKey('::203.0.113.7'), '203.0.113.7', 'the deprecated IPv4-compatible notation');
  t.is(ipKey('::1'), '::/56');
  t.is(ipKey('198.51.100.1'), '198.51.100.1');
  t.is(ipKey('unknown'), 'unknown');
  t.throws(() => ipKey('::1', 65), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "ipv6Subnet" option must be false or an integer in [32, 64]. Received 65',
  });
  t.throws(() => rateLimit({ limit: 1, windowMs: 1000, ipv6Subnet: true as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: 'The "ipv6Subnet" option must be false or a number. Received type boolean (true)',
  });
});

test(
  title('every middleware and hook checks trustProxy and ipv6Subnet, also where a key function replaces them'),
  (t) => {
    // An Express-style `trustProxy: 'loopback'` is no keepcount value: accepted beside a `key`, it
    // would be refused the day the key goes, far from where it was written.
    const limiter = new Limiter({ bestEffort: { requests: { perSecond: 1, burst: 1 } } });
    const key = () => 'k';
    const makers: Record<string, (extra: object) => unknown> = {
      rateLimit: (extra) => rateLimit({ limit: 1, windowMs: 1000, ...extra }),
      rateLimitHook: (extra) => rateLimitHook({ limit: 1, windowMs: 1000, ...extra }),
      tokenBucket: (extra) => tokenBucket({ limiter, ...extra }),
      tokenBucketHook: (extra) => tokenBucketHook({ limiter, ...extra }),
      upstreamLimit: (extra) => upstreamLimit({ max: 1, ...extra }),
      upstreamLimitHook: (extra) => upstreamLimitHook({ max: 1, ...extra }),
      'upstreamLimit perClient': (extra) => upstreamLimit({ max: 1, perClient: 1, ...extra }),
    };
    const bad: [object, typeof TypeError | typeof RangeError][] = [
      [{ trustProxy: 'loopback' }, TypeError],
      [{ trustProxy: -1 }, RangeError],
      [{ ipv6Subnet: 'x' }, TypeError],
      [{ ipv6Subnet: 128 }, RangeError],
    ];
    for (const [name, make] of Object.entries(makers)) {
      for (const [options, instanceOf] of bad) {
        for (const extra of [options, { ...options, key }]) {
          t.throws(() => make(extra), { instanceOf, message: /"(trustProxy|ipv6Subnet)" option/ }, name);
        }
      }
      t.notThrows(() => make({ trustProxy: 1, ipv6Subnet: 64, key }), name);
    }
  },
);

for (const [name, serve] of Object.entries(frameworks)) {
  test(
    title(`${name}: tokenBucket admits each key's burst, refuses with Retry-After, refills with time`),
    async (t) => {
      const clock = new ManualClock();
      const limiter = new Limiter({
        bestEffort: { requests: { perSecond: 1, burst: 2 } },
        keys: [
          ['gold', { requests: { perSecond: 10, burst: 5 } }],
          ['metered', { units: { perSecond: 100, burst: 10 } }],
        ],
        clock,
      });
      const server = serve(
        [
          tokenBucket({
            limiter,
            key: (req) => String(req.headers['x-api-key'] ?? ''),
            cost: (req) => Number(req.headers['x-cost'] ?? 1),
            skip: (req) => req.url === '/health',
          }),
        ],
        ok,
      );
      const port = await listen(server);
      t.teardown(() => close(server));
      const statuses = async (n: number, headers: Record<string, string>) => {
        const out = [];
        for (let i = 0; i < n; i++) out.push((await get(port, '/', headers)).status);
        return out;
      };

      t.deepEqual(await statuses(6, { 'x-api-key': 'gold' }), [200, 200, 200, 200, 200, 429]);
      t.deepEqual(
        await statuses(3, { 'x-api-key': 'anyone' }),
        [200, 200, 429],
        'unknown keys share the best-effort bucket',
      );
      const refused = await get(port, '/', { 'x-api-key': 'someone-else' });
      t.is(refused.status, 429);
      t.is(refused.headers['retry-after'], '1');
      t.is(refused.headers.ratelimit, undefined, 'no window, so no RateLimit fields');
      t.is((await get(port, '/health', { 'x-api-key': 'anyone' })).status, 200);
      t.is((await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '8' })).status, 200);
      const short = await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '8' });
      t.is(short.status, 429, 'the cost counts in units');
      t.is(short.headers['retry-after'], '1');
      const never = await get(port, '/', { 'x-api-key': 'metered', 'x-cost': '11' });
      t.is(never.status, 429);
      t.is(never.headers['retry-after'], undefined, 'a cost above the burst never fits: no Retry-After');
      clock.advance(1000);
      t.deepEqual(await statuses(1, { 'x-api-key': 'anyone' }), [200]);
    },
  );
}

for (const [name, serve] of Object.entries(frameworks)) {
  test(title(`${name}: tokenBucket's Retry-After is whole seconds however long the wait`), async (t) => {
    // A SyncedLimiter with a vast burst refilling slowly waits longer than a Limiter ever reports
    // (2^64 ns): past 10^21 s its wait went out as `Retry-After: 4.8e+21`.
    const waits: Record<string, number> = { '/short': 2500, '/long': 1e21, '/vast': 5e24 };
    const limiter = { check: (key: string) => ({ allowed: false, retryAfterMs: waits[key]! }) };
    const server = serve([tokenBucket({ limiter, key: (req) => req.url! })], ok);
    const port = await listen(server);
    t.teardown(() => close(server));
    const sent = [];
    for (const path of Object.keys(waits)) sent.push((await get(port, path)).headers['retry-after']);
    t.deepEqual(sent, ['3', '18446744074', '18446744074']);
  });
}

test(title('end to end: under a flood of 2,048 addresses no client within its limit gets a 429'), async (t) => {
  t.timeout(60_000);
  // Issue 17's attack through a real server: the flood fills the small 4 × 1024 sketch that once
  // refused about half of the fresh clients on their first request. Each client is an address in
  // X-Forwarded-For behind one trusted proxy hop. Deterministic: no false-failure probability.
  const limit = rateLimit({ limit: 5, windowMs: 600_000, hashes: 4, slots: 1024, trustProxy: 1 });
  const server = createServer((req, res) => limit(req, res, () => res.end('ok')));
  const port = await listen(server);
  t.teardown(() => close(server));
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  t.teardown(() => agent.destroy());
  const send = (ip: string): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, agent, headers: { 'x-forwarded-for': ip } }, (res) =>
        res.resume().on('end', () => resolve(res.statusCode ?? 0)),
      );
      req.on('error', reject);
      req.end();
    });
  const flood = Array.from({ length: 2048 }, (_, i) => `198.18.${i >> 8}.${i & 255}`);
  let floodRefused = 0;
  for (let round = 0; round < 6; round++) {
    const statuses = await Promise.all(flood.map(send));
    if (round < 5)
      t.true(
        statuses.every((s) => s === 200),
        `round ${round + 1}: a flooder within its limit got 429`,
      );
    else floodRefused = statuses.filter((s) => s === 429).length;
  }
  const fresh = Array.from({ length: 256 }, (_, i) => `203.0.113.${i}`);
  const first = await Promise.all(fresh.map(send));
  t.is(first.filter((s) => s === 429).length, 0, 'fresh clients refused on their first request');
  // The threshold is ceil(5 / 4) = 2: a flooder entered the table by its second request at the
  // latest, so its sixth is refused unless it entered on its second (then five counted exactly).
  t.log(`flooders refused on their 6th request: ${floodRefused} of 2048`);
  const seventh = await Promise.all(flood.slice(0, 256).map(send));
  t.true(
    seventh.every((s) => s === 429),
    'every flooder is refused by its 7th request',
  );
});
