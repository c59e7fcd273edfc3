import test from 'ava';
import { ManualClock, Rate } from '../lib/index.js';
import { WindowQuota } from '../lib/http/index.js';
import { slotsFor } from '../lib/http/window-quota.js';
import { throwsShape, title } from './helpers.js';

test(title('slotsFor sizes 5.1 counters per client for 4 hashes and meets its bound exactly'), (t) => {
  t.is(slotsFor(10_000, 4), 51_072);
  t.is(slotsFor(1000, 4), 5108);
  for (const [clients, hashes] of [
    [1, 1],
    [100, 4],
    [10_000, 4],
    [5000, 8],
  ] as const) {
    const bound = (slots: number) => (1 - (1 - 1 / slots) ** clients) ** hashes;
    const slots = slotsFor(clients, hashes);
    // The tolerance absorbs floating-point rounding in the bound's own evaluation.
    t.true(bound(slots) <= 1e-3 * (1 + 1e-9), `${clients} clients, ${hashes} hashes: ${slots} slots suffice`);
    t.true(bound(slots - 1) > 1e-3, `${clients} clients, ${hashes} hashes: ${slots - 1} do not`);
  }
});

test(
  title('the default quota, sized for 10,000 clients, does not refuse fresh clients during a 2,048-address flood'),
  (t) => {
    // Issue 12 #5: 2,048 addresses × 6 requests against limit 5, then 300 fresh clients. With the old
    // 4 × 1024 sketch 167 to 173 of them were refused on their first request. Now each is refused
    // with probability at most (1 − (1 − 1/51,072)^2,347)^4 = 4.1e-6 (slotsFor's bound, 2,347 other
    // keys), so two or more of 300 refused has probability 7.4e-7: this test's false-failure rate.
    const clock = new ManualClock();
    const quota = new WindowQuota({ limit: 5, windowMs: 60_000, clock });
    for (let round = 0; round < 6; round++) {
      for (let i = 0; i < 2048; i++) quota.consume(`198.18.${i >> 8}.${i & 255}`);
    }
    let refused = 0;
    for (let i = 0; i < 300; i++) if (!quota.consume(`203.0.113.${i & 255}:${i}`).allowed) refused++;
    t.log(`fresh clients refused on their first request: ${refused} of 300`);
    t.true(refused <= 1);
  },
);

test(
  title('with heavy hitters, a flood that saturates the sketch refuses no client within its limit and holds flooders'),
  (t) => {
    // The attack of issue 17 on the old 4 × 1024 sketch: 2,048 addresses × 8 requests fill it, so
    // every fresh client reads over the limit. Heavy hitters refuse only on an exact count, so no
    // client that sent at most `limit` is refused (deterministic: no false-failure probability).
    const clock = new ManualClock();
    const quota = new WindowQuota({ limit: 5, windowMs: 60_000, clock, hashes: 4, slots: 1024, seed: 1 });
    const sent = new Map<string, number>();
    const admitted = new Map<string, number>();
    const send = (key: string) => {
      const n = (sent.get(key) ?? 0) + 1;
      sent.set(key, n);
      const decision = quota.consume(key);
      if (n <= 5) t.true(decision.allowed, `${key} refused at its request ${n}`);
      if (decision.allowed) admitted.set(key, (admitted.get(key) ?? 0) + 1);
      return decision;
    };
    const flooders = Array.from({ length: 2048 }, (_, i) => `198.18.${i >> 8}.${i & 255}`);
    for (let round = 0; round < 8; round++) for (const flooder of flooders) send(flooder);
    for (let i = 0; i < 300; i++) for (let r = 0; r < 5; r++) send(`203.0.113.${i & 255}:${i}`);
    // The README's "each flooder is held to limit + threshold − 1": the threshold is ceil(5 / 4) =
    // 2, so of its 8 requests a flooder gets at most 5 + 2 − 1 = 6 (the sixth only if it entered
    // the table on its second request or later), whatever the sketch reads. Deterministic.
    const most = Math.max(...flooders.map((flooder) => admitted.get(flooder) ?? 0));
    const sixes = flooders.filter((flooder) => admitted.get(flooder) === 6).length;
    t.log(`flooders admitted at most ${most} of 8 (${sixes} of 2,048 got a sixth)`);
    t.true(most <= 6, `a flooder admitted ${most} times`);
    const stats = quota.stats()!;
    t.is(stats.overflowEvents, 0);
    t.true(stats.tracked <= 2048 + 300);
    t.log(`tracked ${stats.tracked} clients`);
    t.is(quota.topTalkers(1)[0]!.upper >= 6, true);
  },
);

test(title('with heavy hitters, a flood leaves clients it never saw within their limit on every read'), (t) => {
  // One row of 64 counters under 3,000 one-request addresses: every estimate is far over the
  // limit, while the table has room. A client never seen has sent nothing, so the reads that count
  // nothing (`current`, a cost of 0) must not put it over the limit either; they read the sketch
  // there. Deterministic: no false-failure probability.
  const quota = new WindowQuota({
    limit: 10,
    windowMs: 60_000,
    clock: new ManualClock(),
    hashes: 1,
    slots: 64,
    seed: 1,
  });
  for (let i = 0; i < 3000; i++) quota.consume(`198.18.${i >> 8}.${i & 255}`);
  t.is(quota.stats()!.overflowEvents, 0);
  for (let i = 0; i < 100; i++) {
    const fresh = `203.0.113.${i}`;
    t.true(quota.current(fresh).count < quota.limit, `${fresh}: current`);
    t.true(quota.consume(fresh, 0).allowed, `${fresh}: consume(key, 0)`);
    t.true(quota.count(fresh, 0).count < quota.limit, `${fresh}: count(key, 0)`);
  }
  t.is(quota.consume('203.0.113.0').count, 1);
});

test(title('with heavy hitters, a client over the limit is refused within limit + threshold − 1'), (t) => {
  const clock = new ManualClock();
  for (const threshold of [1, 10, 25]) {
    const quota = new WindowQuota({ limit: 100, windowMs: 1000, clock, heavyHitters: { threshold } });
    let admitted = 0;
    for (let i = 0; i < 500; i++) if (quota.consume('flooder').allowed) admitted++;
    t.true(admitted >= 100 && admitted <= 100 + threshold - 1, `threshold ${threshold}: ${admitted} admitted`);
    t.deepEqual(
      quota.topTalkers(5).map((row) => row.key),
      ['flooder'],
    );
    clock.advance(1000);
  }
});

test(title('with heavy hitters, remaining only falls within a window and is 0 by the first refusal'), (t) => {
  // remaining was once limit − the exact count, which starts when the client enters the table: at
  // limit 100 (threshold 25) r read 76 at the 24th request, 99 at the 25th, 0 at the 124th. Now it
  // is limit − the upper bound, which for one client alone is its true count. A read of cost 0
  // between requests says the same. The next window starts afresh.
  const clock = new ManualClock();
  for (const given of [undefined, 1, 10, 100]) {
    const heavyHitters = given === undefined ? true : { threshold: given };
    const quota = new WindowQuota({ limit: 100, windowMs: 1000, clock, heavyHitters });
    const threshold = given ?? 25;
    const sent: string[] = [];
    for (let i = 1; i <= 130; i++) {
      const { allowed, remaining } = quota.consume('client');
      sent.push(`${i}:${allowed ? 'ok' : 'refused'} r=${remaining}`);
      t.is(quota.consume('client', 0).remaining, remaining, `threshold ${threshold}: a read at request ${i}`);
    }
    const expected = Array.from({ length: 130 }, (_, i) => {
      const n = i + 1;
      return `${n}:${n <= 100 + threshold - 1 ? 'ok' : 'refused'} r=${Math.max(0, 100 - n)}`;
    });
    t.deepEqual(sent, expected, `threshold ${threshold}`);
    clock.advance(1000);
    t.like(quota.consume('client'), { allowed: true, remaining: 99 });
  }
});

test(title("with heavy hitters, remaining only falls while a flood raises the client's estimate"), (t) => {
  // One row of 64 counters, and 20 new addresses between two requests of each client: the flood
  // raises the clients' estimates, so they read over their true counts before entering the table
  // (and enter early). r must still only fall and reach 0 by the first refusal, and no request
  // within the limit be refused. Any seed: these hold whatever the collisions.
  const quota = new WindowQuota({ limit: 100, windowMs: 60_000, clock: new ManualClock(), hashes: 1, slots: 64 });
  const clients = ['203.0.113.1', '203.0.113.2', '203.0.113.3'];
  const last = clients.map(() => Infinity);
  let flooder = 0;
  for (let i = 1; i <= 130; i++) {
    for (let f = 0; f < 20; f++, flooder++) quota.consume(`198.18.${flooder >> 8}.${flooder & 255}`);
    for (const [c, client] of clients.entries()) {
      const { allowed, remaining } = quota.consume(client);
      t.true(remaining <= last[c]!, `${client}: r rose from ${last[c]} to ${remaining} at request ${i}`);
      last[c] = remaining;
      if (i <= 100) t.true(allowed, `${client}: refused at request ${i}`);
      else if (!allowed) t.is(remaining, 0, `${client}: refused at request ${i} with r=${remaining}`);
    }
  }
  t.is(quota.stats()!.overflowEvents, 0);
  for (const client of clients) t.false(quota.consume(client).allowed);
});

test(
  title('when more clients cross the threshold than the table holds, the rest are judged by the sketch and counted'),
  (t) => {
    const clock = new ManualClock();
    const quota = new WindowQuota({ limit: 2, windowMs: 1000, clock, heavyHitters: { capacity: 4 }, seed: 5 });
    for (let k = 0; k < 10; k++) for (let i = 0; i < 4; i++) quota.consume(`k${k}`);
    const stats = quota.stats()!;
    t.is(stats.tracked, 4);
    t.true(stats.overflowEvents > 0);
    // Overflowed clients over the limit are still refused, by their sketch estimate.
    t.false(quota.consume('k9').allowed);
  },
);

test(title('heavyHitters: false keeps the plain sketch, which lists no talkers'), (t) => {
  const quota = new WindowQuota({ limit: 1, windowMs: 1000, heavyHitters: false });
  t.true(quota.consume('a').allowed);
  t.false(quota.consume('a').allowed);
  t.deepEqual(quota.topTalkers(3), []);
  t.is(quota.stats(), undefined);
  t.throws(() => new WindowQuota({ limit: 1, windowMs: 1000, heavyHitters: 'yes' as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
  });
  t.throws(() => new WindowQuota({ limit: 4, windowMs: 1000, heavyHitters: { threshold: 5 } }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "threshold" option must be an integer in \[1, 4\]/,
  });
});

test(title('consume and current report the same exact milliseconds until the window ends'), (t) => {
  // (1 − 0.7) × 10 is 3.0000000000000004 in doubles: current() once rounded that up to 4. Both
  // ways of counting: heavy hitters at threshold 1 (exact), and the sketch alone.
  for (const heavyHitters of [{ threshold: 1 }, false]) {
    const clock = new ManualClock();
    const quota = new WindowQuota({ limit: 5, windowMs: 10, clock, heavyHitters });
    clock.advance(7);
    t.like(quota.consume('a'), { count: 1, remaining: 4, resetMs: 3, allowed: true });
    t.deepEqual(quota.current('a'), { count: 1, resetMs: 3 });
    clock.advance(2);
    t.like(quota.consume('a', 5), { count: 6, remaining: 0, resetMs: 1, allowed: false });
    t.deepEqual(quota.current('a'), { count: 6, resetMs: 1 });
    // The next request ends the window and opens a full one.
    clock.advance(1);
    t.like(quota.consume('a'), { count: 1, resetMs: 10, allowed: true });
    t.deepEqual(quota.current('a'), { count: 1, resetMs: 10 });
  }
});

test(title('count() counts as consume() does without deciding'), (t) => {
  for (const heavyHitters of [{ threshold: 2 }, false]) {
    const clock = new ManualClock();
    const counted = new WindowQuota({ limit: 3, windowMs: 10, clock, heavyHitters });
    const consumed = new WindowQuota({ limit: 3, windowMs: 10, clock, heavyHitters });
    const outcomes = { allowed: 0, refused: 0 };
    for (let i = 0; i < 6; i++) {
      clock.advance(1);
      const { count, resetMs, allowed } = consumed.consume('a', 2);
      outcomes[allowed ? 'allowed' : 'refused']++;
      t.deepEqual(counted.count('a', 2), { count, resetMs });
    }
    // A zero cost reads without counting, as consume(key, 0).
    const { count, allowed } = consumed.consume('a', 0);
    outcomes[allowed ? 'allowed' : 'refused']++;
    t.deepEqual(counted.count('a', 0), { count, resetMs: 4 });
    t.true(outcomes.refused > 0);
    t.deepEqual(consumed.decisions(), outcomes);
    t.deepEqual(counted.decisions(), { allowed: 0, refused: 0 });
  }
});

test(title('a quota counts in a given Rate over its window, and refuses a mismatched one'), (t) => {
  const clock = new ManualClock();
  const rate = new Rate({ intervalMs: 1000, clock, seed: 1 });
  const quota = new WindowQuota({ limit: 2, windowMs: 1000, rate });
  t.deepEqual(
    [1, 2, 3].map(() => quota.consume('k').allowed),
    [true, true, false],
  );
  t.is(rate.observe('k', 0), 3, 'the counts are in the given rate');
  t.deepEqual(quota.topTalkers(1), [], 'a Rate keeps no talkers');
  t.throws(() => new WindowQuota({ limit: 2, windowMs: 500, rate }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /The "rate" option must be a Rate whose intervalMs is the windowMs \(500\)/,
  });
  t.throws(() => new WindowQuota({ limit: 2, windowMs: 1000, rate, heavyHitters: true }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
  });
  t.throws(() => new WindowQuota({ limit: 2, windowMs: 1000, rate: {} as never }), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /The "rate" option must be a Rate/,
  });
});

test(title('cost and delta are checked the same with and without heavy hitters'), (t) => {
  for (const heavyHitters of [true, false]) {
    const quota = new WindowQuota({ limit: 2, windowMs: 1000, seed: 1n, clock: new ManualClock(), heavyHitters });
    quota.consume('k', 3);
    const mode = `heavyHitters: ${heavyHitters}`;
    // Before, with heavy hitters NaN and negatives counted nothing silently; without, -1 was a
    // refund that turned a refusal into an admission, and 2^32 was counted.
    for (const cost of [NaN, -1, -Infinity, Infinity, 1.5, 2 ** 32]) {
      throwsShape(t, () => quota.consume('k', cost), {
        instanceOf: RangeError,
        code: 'ERR_OUT_OF_RANGE',
        message: `The "cost" argument must be an integer in [0, 4294967295]. Received ${String(cost)}`,
      });
    }
    throwsShape(t, () => quota.count('k', '1' as never), {
      instanceOf: TypeError,
      code: 'ERR_INVALID_ARG_TYPE',
      message: 'The "cost" argument must be of type number. Received type string ("1")',
    });
    for (const delta of [NaN, 2 ** 32, -(2 ** 32)]) {
      throwsShape(t, () => quota.adjust('k', delta), {
        instanceOf: RangeError,
        code: 'ERR_OUT_OF_RANGE',
        message: `The "delta" argument must be an integer in [-4294967295, 4294967295]. Received ${String(delta)}`,
      });
    }
    // A cost of 0 reads without counting; the count stood through every refusal above.
    t.like(quota.consume('k', 0), { allowed: false, count: 3 }, mode);
    quota.adjust('k', -3);
    t.like(quota.consume('k', 0), { allowed: true, count: 0 }, mode);
  }
});

test(title('close() frees the counts a quota made and leaves a given Rate open'), (t) => {
  const closed = (what: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: `This ${what} was closed; its counters are gone`,
  });
  const heavy = new WindowQuota({ limit: 5, windowMs: 1000, clock: new ManualClock() });
  t.true(heavy.consume('a').allowed);
  heavy.close();
  heavy.close();
  for (const call of [
    () => heavy.consume('a'),
    () => heavy.count('a'),
    () => heavy.adjust('a', 1),
    () => heavy.adjust('a', -1),
    // As a quota over a plain rate: adding 0 after a close is refused too, not a silent no-op.
    () => heavy.adjust('a', 0),
    () => heavy.topTalkers(1),
    () => heavy.stats(),
  ]) {
    throwsShape(t, call, closed('HeavyHitters'));
  }
  t.deepEqual(heavy.decisions(), { allowed: 1, refused: 0 });

  // With heavyHitters: false, the calls that read no counts refuse too (they answered [] and
  // undefined, and metrics kept exporting the closed quota's gauges).
  const plainOwned = new WindowQuota({ limit: 5, windowMs: 1000, heavyHitters: false, clock: new ManualClock() });
  t.deepEqual([plainOwned.topTalkers(3), plainOwned.stats()], [[], undefined]);
  plainOwned.close();
  for (const call of [() => plainOwned.consume('a'), () => plainOwned.topTalkers(3), () => plainOwned.stats()]) {
    throwsShape(t, call, closed('Rate'));
  }

  const rate = new Rate({ intervalMs: 1000, clock: new ManualClock() });
  let given: WindowQuota;
  {
    using plain = new WindowQuota({ limit: 5, windowMs: 1000, rate });
    t.is(plain.consume('a').count, 1);
    given = plain;
  }
  throwsShape(t, () => given.consume('a'), closed('Rate'));
  throwsShape(t, () => given.adjust('a', 0), closed('Rate'));
  // The caller's rate counts on.
  t.is(rate.observe('a'), 2);
});
