// Limiter.openShared: token buckets shared by real processes (child_process.fork workers) through
// a segment file, and tokenBucket over one. On the fallback backend every entry point refuses with
// ERR_KEEPCOUNT_UNSUPPORTED; argument checks are the same on both.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import test from 'ava';
import {
  backend,
  Limiter,
  SharedLimiter,
  type LimiterDecision,
  type Quota,
  type SharedLimiterStats,
} from '../lib/index.js';
import { get } from './http-client.js';
import { throwsShape, title } from './helpers.js';
import { scratch, unsupported, workers } from './shared-workers.js';

const SEED = 0x5eedn;

/** `quota` as a limiter's `quota` reports it: every limit as amount per `periodMs`. */
function quotaInfoOf(quota: Quota): unknown {
  const info = (limit: NonNullable<Quota['requests']>) =>
    'perSecond' in limit ? { amount: limit.perSecond, periodMs: 1000, burst: limit.burst } : limit;
  return Object.fromEntries(Object.entries(quota).map(([name, limit]) => [name, info(limit)]));
}

test(title('four processes hammering three keys admit at most burst + rate × t per key'), async (t) => {
  const dir = scratch(t);
  const quota = { requests: { perSecond: 100, burst: 10 } };
  if (backend === 'fallback') {
    throwsShape(t, () => Limiter.openShared('hammered', { quota, seed: SEED, dir }), unsupported('Limiter.openShared'));
    return;
  }
  const all = await workers(4);
  await Promise.all(all.map((w) => w.send({ op: 'open-limiter', name: 'hammered', dir, quota, capacity: 16 })));
  const keys = ['a', 'b', 'c'];
  const ms = 1500;
  // Every check's clock reading (the host's CLOCK_MONOTONIC, which performance.now() also reads)
  // lies between these two, and the buckets start full: so the bound below is exact, no slack.
  const before = performance.now();
  const admitted = (await Promise.all(all.map((w) => w.send({ op: 'hammer', keys, ms })))) as number[][];
  const elapsedMs = performance.now() - before;
  const most = Math.floor(10 + (100 * elapsedMs) / 1000);
  // Each worker checks without pause for 1.5 s, taking each token within microseconds of its
  // arrival. Half the refill of those 1.5 s is a margin only a machine that starves all four
  // workers of the CPU for 0.75 s could miss (false-failure probability: that stall's).
  const least = 10 + (100 * ms) / 1000 / 2;
  for (const [i, key] of keys.entries()) {
    const total = admitted.reduce((sum, perKey) => sum + perKey[i]!, 0);
    t.log(`${key}: ${total} admitted (bound ${most} in ${elapsedMs.toFixed(0)} ms, floor ${least})`);
    t.true(total <= most, `${key}: ${total} admitted, at most ${most} allowed in ${elapsedMs.toFixed(0)} ms`);
    t.true(total >= least, `${key}: ${total} admitted, at least ${least} expected`);
    t.true(
      admitted.filter((perKey) => perKey[i]! > 0).length >= 2,
      `${key}: admitted per process ${admitted.map((p) => p[i]).join(', ')}`,
    );
  }
  await Promise.all(all.map((w) => w.exit()));
});

test(title('a full key table sends new keys to the best-effort bucket and counts them, never throwing'), async (t) => {
  const dir = scratch(t);
  // A token an hour: no bucket is full again within the test once its key's check has landed.
  const quota = { requests: { amount: 1, periodMs: 3_600_000, burst: 5 } };
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Limiter.openShared('tiny', { quota, capacity: 4, seed: SEED, dir }),
      unsupported('Limiter.openShared'),
    );
    return;
  }
  const all = await workers(2);
  await Promise.all(all.map((w) => w.send({ op: 'open-limiter', name: 'tiny', dir, quota, capacity: 4 })));
  // 2 × 200 distinct keys against a capacity of 4: 4 get a bucket, 396 checks overflow. Except
  // for the race the Rust module documents first (crates/limits/src/shared/limiter.rs): a key
  // that claimed an entry an instant ago has not taken its token yet, so its bucket is still
  // full, and the other process's new key may take the entry over; it then does not overflow.
  await Promise.all(all.map((w) => w.send({ op: 'distinct', count: 200 })));
  const here = Limiter.openShared('tiny', { quota, capacity: 4, seed: SEED, dir });
  const stats: SharedLimiterStats = here.stats();
  // One in flight in the other process at a time: at most one takeover per entry.
  t.true(stats.takeovers <= 4, `${stats.takeovers} takeovers`);
  t.deepEqual(stats, { keys: 4, capacity: 4, overflow: 396 - stats.takeovers, takeovers: stats.takeovers });
  // The best-effort bucket (the same quota by default) was emptied by the overflow long ago.
  t.false(here.check('yet-another-client').allowed);
  t.is(here.stats().overflow, 397 - stats.takeovers);
  here.close();
  await Promise.all(all.map((w) => w.exit()));
});

test(
  title('once a flood has filled the table, new clients take over its refilled buckets across processes'),
  async (t) => {
    const dir = scratch(t);
    // Two tokens a client, one back every 500 ms: a flooding key checked once is full again then.
    const quota = { requests: { amount: 1, periodMs: 500, burst: 2 } };
    // One token an hour for everyone beyond the table: the flood spends it at once.
    const bestEffort = { requests: { amount: 1, periodMs: 3_600_000, burst: 1 } };
    if (backend === 'fallback') {
      throwsShape(
        t,
        () => Limiter.openShared('flooded', { quota, bestEffort, capacity: 4, seed: SEED, dir }),
        unsupported('Limiter.openShared'),
      );
      return;
    }
    const all = await workers(2);
    await Promise.all(
      all.map((w) => w.send({ op: 'open-limiter', name: 'flooded', dir, quota, bestEffort, capacity: 4 })),
    );
    // 2 × 200 distinct keys against a capacity of 4: the table is full, the best-effort token gone.
    await Promise.all(all.map((w) => w.send({ op: 'distinct', count: 200 })));
    const here = Limiter.openShared('flooded', { quota, bestEffort, capacity: 4, seed: SEED, dir });
    t.like(here.stats(), { keys: 4, overflow: 396 });
    t.false(here.check('before-the-refill').allowed);
    // Before takeovers, every later client shared that spent token for good (until the segment
    // was unlinked): the flood had locked the host's new clients out. Now, once the flood's
    // buckets have refilled, each new client takes one over, in whichever process it arrives.
    await new Promise((resolve) => setTimeout(resolve, 600));
    const admitted = await Promise.all([
      all[0]!.send({ op: 'check', key: 'new-client-a', times: 3 }),
      all[1]!.send({ op: 'check', key: 'new-client-b', times: 3 }),
    ]);
    t.deepEqual(admitted, [2, 2]);
    // The third in this process: its own burst of 2 too, and its third check refused by its own
    // bucket, not counted as overflow (it would refill only if this process stalled 500 ms between
    // two checks, as the workers' third checks would).
    t.deepEqual(
      [0, 1, 2].map(() => here.check('new-client-c').allowed),
      [true, true, false],
    );
    const stats = here.stats();
    t.like(stats, { keys: 4, overflow: 397 });
    t.true(stats.takeovers >= 3, `${stats.takeovers} takeovers`);
    here.close();
    await Promise.all(all.map((w) => w.exit()));
  },
);

test(title('opening with another quota, capacity or seed is ERR_KEEPCOUNT_MISMATCH naming it'), (t) => {
  const dir = scratch(t);
  const quota = { requests: { perSecond: 10, burst: 20 } };
  if (backend === 'fallback') {
    throwsShape(t, () => Limiter.openShared('m', { quota, seed: SEED, dir }), unsupported('Limiter.openShared'));
    throwsShape(t, () => Limiter.unlink('m', { dir }), unsupported('Limiter.unlink'));
    return;
  }
  using first = Limiter.openShared('m', { quota, capacity: 100, seed: SEED, dir });
  t.deepEqual(first.quota, { requests: { amount: 10, periodMs: 1000, burst: 20 } });
  // Every mismatch says how to go on, naming the call that removes the segment as it was opened.
  const fix =
    'every process must open it with the same options; to change them, call ' +
    `Limiter.unlink('m', { dir: '${dir}' }) once no process has it open (or use a new name)`;
  // Quotas as the limiter's `quota` reports them, in milliseconds (they were in nanoseconds).
  const mismatch = (field: string, existing: string, requested: string) => ({
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: `Cannot open the shared segment: ${join(dir, 'keepcount.m')} was created with ${field} ${existing}, not ${requested} as requested: ${fix}`,
  });
  throwsShape(
    t,
    () =>
      Limiter.openShared('m', { quota: { requests: { perSecond: 10, burst: 21 } }, capacity: 100, seed: SEED, dir }),
    mismatch(
      'quota',
      '{ requests: { amount: 10, periodMs: 1000, burst: 20 } }',
      '{ requests: { amount: 10, periodMs: 1000, burst: 21 } }',
    ),
  );
  throwsShape(
    t,
    () =>
      Limiter.openShared('m', {
        quota,
        bestEffort: { units: { perSecond: 1, burst: 1 } },
        capacity: 100,
        seed: SEED,
        dir,
      }),
    mismatch(
      'bestEffort',
      '{ requests: { amount: 10, periodMs: 1000, burst: 20 } }',
      '{ units: { amount: 1, periodMs: 1000, burst: 1 } }',
    ),
  );
  throwsShape(
    t,
    () => Limiter.openShared('m', { quota, capacity: 99, seed: SEED, dir }),
    mismatch('capacity', '100', '99'),
  );
  throwsShape(t, () => Limiter.openShared('m', { quota, capacity: 100, seed: 1, dir }), {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_MISMATCH',
    message: `Cannot open the shared segment: ${join(dir, 'keepcount.m')} was created with another seed than the one requested (seeds are secret: neither is shown): ${fix}`,
  });
});

test(title('a process SIGKILLed in a check loop leaves the buckets working for the survivors'), async (t) => {
  const dir = scratch(t);
  // Never refills: every count below is exact.
  const quota = { requests: { perSecond: 0, burst: 50 } };
  if (backend === 'fallback') {
    throwsShape(t, () => Limiter.openShared('killed', { quota, seed: SEED, dir }), unsupported('Limiter.openShared'));
    return;
  }
  const [doomed, survivor] = await workers(2);
  await Promise.all(
    [doomed, survivor].map((w) => w!.send({ op: 'open-limiter', name: 'killed', dir, quota, capacity: 64 })),
  );
  await doomed!.send({ op: 'check-forever', key: 'hot' });
  await new Promise((resolve) => setTimeout(resolve, 200));
  await doomed!.kill();
  // The key it hammered is decided at once (spent, not wedged); a fresh key gets its whole burst,
  // from another process and from this one.
  using here = Limiter.openShared('killed', { quota, capacity: 64, seed: SEED, dir });
  t.deepEqual(here.check('hot'), { allowed: false, retryAfterMs: Infinity });
  t.deepEqual(await survivor!.send({ op: 'hammer', keys: ['fresh'], ms: 50 }), [50]);
  t.false(here.check('fresh').allowed);
  let admitted = 0;
  for (let i = 0; i < 60; i++) if (here.check('fresher').allowed) admitted++;
  t.is(admitted, 50);
  await survivor!.exit();
});

test(title('a damaged limiter segment is ERR_KEEPCOUNT_CORRUPT, and unlink clears it'), (t) => {
  const dir = scratch(t);
  const quota = { requests: { perSecond: 1, burst: 1 } };
  if (backend === 'fallback') {
    throwsShape(t, () => Limiter.openShared('d', { quota, seed: SEED, dir }), unsupported('Limiter.openShared'));
    return;
  }
  const path = join(dir, 'keepcount.d');
  const corrupt = {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CORRUPT',
    message: `Cannot open the shared segment: ${path} is not a valid keepcount segment (checksum check failed); remove it to start afresh`,
  };
  // Byte 25 is in the header's seed; byte 150 in the per-key quota, checksummed on its own.
  for (const at of [25, 150]) {
    Limiter.openShared('d', { quota, seed: SEED, dir }).close();
    const bytes = readFileSync(path);
    bytes[at]! ^= 1;
    writeFileSync(path, bytes);
    throwsShape(t, () => Limiter.openShared('d', { quota, seed: SEED, dir }), corrupt);
    Limiter.unlink('d', { dir });
  }
  const fresh = Limiter.openShared('d', { quota, seed: SEED, dir });
  t.true(fresh.check('k').allowed);
  fresh.close();
  fresh.close();
  const closed = {
    instanceOf: Error,
    code: 'ERR_KEEPCOUNT_CLOSED',
    message: 'This Limiter was closed; its counters are gone',
  };
  throwsShape(t, () => fresh.check('k'), closed);
  throwsShape(t, () => fresh.stats(), closed);
});

test(title('tokenBucket over a shared Limiter holds one bucket per client across processes'), async (t) => {
  const dir = scratch(t);
  const quota = { requests: { perSecond: 0, burst: 6 } };
  if (backend === 'fallback') {
    throwsShape(t, () => Limiter.openShared('http', { quota, seed: SEED, dir }), unsupported('Limiter.openShared'));
    return;
  }
  const all = await workers(2);
  await Promise.all(all.map((w) => w.send({ op: 'open-limiter', name: 'http', dir, quota, capacity: 64 })));
  const ports = (await Promise.all(all.map((w) => w.send({ op: 'serve-bucket' })))) as number[];
  // 5 requests to each process's server from one client: per-process buckets would admit 10.
  const statuses: number[] = [];
  for (let i = 0; i < 10; i++) statuses.push((await get(ports[i % 2]!)).status);
  t.is(statuses.filter((s) => s === 200).length, 6, statuses.join(' '));
  t.is(statuses.filter((s) => s === 429).length, 4, statuses.join(' '));
  await Promise.all(all.map((w) => w.exit()));
});

test(title('day and month quotas a local Limiter takes open shared, and decide as the local one'), (t) => {
  const dir = scratch(t);
  const DAY = 86_400_000;
  // Each full bucket is 2^64 nanosecond units or more as written (burst × period): opening them
  // was refused, "burst times its period in nanoseconds must be below 2^64". In lowest terms
  // (amount and period divided by their gcd), which decides exactly alike, each fits.
  const cases: Record<string, { quota: Quota; cost: number; admitted: number }> = {
    '1M requests a day': {
      quota: { requests: { amount: 1_000_000, periodMs: DAY, burst: 1_000_000 } },
      cost: 1,
      admitted: 1_000_000,
    },
    '10k requests per 30 days': {
      quota: { requests: { amount: 10_000, periodMs: 30 * DAY, burst: 10_000 } },
      cost: 1,
      admitted: 10_000,
    },
    '5 GB a day': { quota: { units: { amount: 5e9, periodMs: DAY, burst: 5e9 } }, cost: 1e8, admitted: 50 },
    '100 MB a second, bursts of 100 GB': {
      quota: { units: { perSecond: 1e8, burst: 1e11 } },
      cost: 1e10,
      admitted: 10,
    },
  };
  for (const [label, { quota, cost, admitted }] of Object.entries(cases)) {
    if (backend === 'fallback') {
      throwsShape(
        t,
        () => Limiter.openShared(label.replace(/\W/g, ''), { quota, seed: SEED, dir }),
        unsupported('Limiter.openShared'),
      );
      continue;
    }
    using shared = Limiter.openShared('long', { quota, capacity: 4, seed: SEED, dir });
    t.deepEqual(shared.quota, quotaInfoOf(quota), label);
    const local = new Limiter({ bestEffort: quota });
    // The whole burst and then a refusal, alike: a million checks take long enough for a few
    // more requests to refill (11.6 a second), hence a slack of one in a thousand (86 s of them).
    const spend = (check: () => LimiterDecision) => {
      let allowed = 0;
      while (check().allowed && allowed <= 2 * admitted) allowed++;
      return allowed;
    };
    for (const allowed of [spend(() => shared.check('k', cost)), spend(() => local.check('k', cost))]) {
      t.true(allowed >= admitted && allowed <= admitted + Math.floor(admitted / 1000), `${label}: ${allowed}`);
    }
    shared.close();
    Limiter.unlink('long', { dir });
  }
});

test(title('processes opening a shared Limiter with quotas that decide alike share its buckets'), (t) => {
  const dir = scratch(t);
  const tenASecond = { requests: { perSecond: 10, burst: 20 } };
  const twentyEveryTwo = { requests: { amount: 20, periodMs: 2000, burst: 20 } };
  if (backend === 'fallback') {
    throwsShape(
      t,
      () => Limiter.openShared('alike', { quota: tenASecond, seed: SEED, dir }),
      unsupported('Limiter.openShared'),
    );
    return;
  }
  // Refused as another quota before, though every decision is the same.
  using a = Limiter.openShared('alike', { quota: tenASecond, seed: SEED, dir });
  using b = Limiter.openShared('alike', { quota: twentyEveryTwo, seed: SEED, dir });
  let allowed = 0;
  for (let i = 0; i < 30; i++) if ((i % 2 === 0 ? a : b).check('k').allowed) allowed++;
  t.is(allowed, 20, 'one bucket of 20 between them');
  // A day's quota written either way, the segment keeping it in lowest terms.
  const day = { requests: { amount: 1_000_000, periodMs: 86_400_000, burst: 1_000_000 } };
  const lowest = { requests: { amount: 1, periodMs: 86.4, burst: 1_000_000 } };
  using c = Limiter.openShared('day', { quota: day, seed: SEED, dir });
  using d = Limiter.openShared('day', { quota: lowest, seed: SEED, dir });
  t.true(c.check('k', 1).allowed && d.check('k', 1).allowed);
  // A mismatch shows the segment's quota as the segment keeps it, saying so ("1 per 86.4 ms" alone
  // read as a quota nobody wrote), and the requested one as given.
  throwsShape(
    t,
    () => Limiter.openShared('day', { quota: { requests: { ...day.requests, burst: 999_999 } }, seed: SEED, dir }),
    {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_MISMATCH',
      message:
        `Cannot open the shared segment: ${join(dir, 'keepcount.day')} was created with quota { requests: { amount: ` +
        '1, periodMs: 86.4, burst: 1000000 } } (as the segment keeps it: a limit whose full bucket would not fit 64 ' +
        'bits as written is kept in lowest terms, amount and periodMs divided by their greatest common divisor, ' +
        'which decides alike), not { requests: { amount: 1000000, periodMs: 86400000, burst: 999999 } } as ' +
        'requested: every process must open it with the same options; to change them, call ' +
        `Limiter.unlink('day', { dir: '${dir}' }) once no process has it open (or use a new name)`,
    },
  );
  // Another burst decides otherwise: still a mismatch, naming the quota.
  throwsShape(
    t,
    () => Limiter.openShared('alike', { quota: { requests: { perSecond: 10, burst: 21 } }, seed: SEED, dir }),
    {
      instanceOf: Error,
      code: 'ERR_KEEPCOUNT_MISMATCH',
      message:
        /was created with quota \{ requests: \{ amount: 10, periodMs: 1000, burst: 20 \} \}, not \{ requests: \{ amount: 10, periodMs: 1000, burst: 21 \} \} as requested: every/,
    },
  );
});

test(
  title('a quota too wide for a shared bucket even in lowest terms is a RangeError naming its burst, on both backends'),
  (t) => {
    const dir = scratch(t);
    // One request a day: no common factor to take out, 8.64 × 10^13 ns a token, so at most
    // floor((2^64 − 1) / 8.64e13) = 213,503 tokens fit a bucket word.
    const wide = { requests: { amount: 1, periodMs: 86_400_000, burst: 213_504 } };
    const fits = { requests: { amount: 1, periodMs: 86_400_000, burst: 213_503 } };
    const refused = (option: string) => ({
      instanceOf: RangeError,
      code: 'ERR_OUT_OF_RANGE',
      message:
        `The "${option}" option must be at most 213503 for 1 every 86400000 ms in a shared limiter, whose buckets ` +
        'hold burst × period / gcd(amount, period) nanosecond units below 2^64 (a local Limiter has no such limit). ' +
        'Received 213504',
    });
    throwsShape(t, () => Limiter.openShared('wide', { quota: wide, seed: SEED, dir }), refused('quota.requests.burst'));
    throwsShape(
      t,
      () => Limiter.openShared('wide', { quota: fits, bestEffort: { units: wide.requests }, seed: SEED, dir }),
      refused('bestEffort.units.burst'),
    );
    if (backend === 'fallback') {
      throwsShape(
        t,
        () => Limiter.openShared('wide', { quota: fits, seed: SEED, dir }),
        unsupported('Limiter.openShared'),
      );
      return;
    }
    using limiter = Limiter.openShared('wide', { quota: fits, seed: SEED, dir });
    t.true(limiter.check('k').allowed);
  },
);

test(title('Limiter.openShared checks its options before the backend, on both backends'), (t) => {
  const quota = { requests: { perSecond: 1, burst: 1 } };
  throwsShape(t, () => Limiter.openShared('x', { quota, seed: SEED, capacity: 0 }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: 'The "capacity" option must be an integer in [1, 4194304]. Received 0',
  });
  throwsShape(t, () => Limiter.openShared('x', { quota } as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "seed" option must be of type bigint or number \(every process must pass the same one\)/,
  });
  throwsShape(t, () => Limiter.openShared('x', { seed: SEED } as never), {
    instanceOf: TypeError,
    code: 'ERR_INVALID_ARG_TYPE',
    message: /^The "quota" option must be of type object/,
  });
  throwsShape(t, () => Limiter.openShared('../x', { quota, seed: SEED }), {
    instanceOf: RangeError,
    code: 'ERR_OUT_OF_RANGE',
    message: /^The "name" argument must be 1 to 200 ASCII letters/,
  });
  t.true(typeof SharedLimiter === 'function');
});
