/**
 * The HTTP options' types refuse the pairs the parsers refuse with ERR_INCOMPATIBLE_OPTION_PAIR, and
 * take every combination the parsers take. tsx runs this file unchecked; tsc checks it (`npm run
 * lint`), and each `@ts-expect-error` fails that check once its pair compiles again. Every object is
 * also handed to the real middleware, so what the types refuse is what the runtime refuses.
 */
import test from 'ava';
import type { Request } from 'express';
import type { IncomingMessage, ServerResponse } from 'node:http';
import Fastify from 'fastify';
import { Inflight, ManualClock, Rate } from '../lib/index.js';
import { keepcountFastify, rateLimitHook, upstreamLimitHook } from '../lib/http/fastify.js';
import {
  UpstreamLimit,
  WindowQuota,
  rateLimit,
  upstreamLimit,
  type QuotaTalkers,
  type RateLimitDecision,
  type RateLimitMiddleware,
  type RateLimitOptions,
  type RequestQuota,
  type UpstreamLimitOptions,
  type WindowQuotaOptions,
} from '../lib/http/index.js';
import { rejectsShape, throwsShape, title, type ErrorShape } from './helpers.js';

/** The error of `given` beside the option `moot`, `why` as the parser words it. */
const pair = (given: string, moot: string, why: string): ErrorShape => ({
  instanceOf: TypeError,
  code: 'ERR_INCOMPATIBLE_OPTION_PAIR',
  message: `The "${given}" option cannot be used with "${moot}": ${why}`,
});

const QUOTA = 'a quota has its own limit, window and counters';
const RATE = 'a Rate has its own shape, seed and clock (size a shared one with slotsFor)';
const LIMIT = 'an UpstreamLimit has its own max and counters';

/** What a new quota needs besides the options under test. */
const window = { limit: 5, windowMs: 1000 };

test(title('a quota beside any option of a new quota is refused by the types and at run time'), (t) => {
  const quota = new WindowQuota(window);
  const rate = new Rate({ intervalMs: 1000 });
  t.teardown(() => {
    quota.close();
    rate.close();
  });
  // `satisfies`: tsc fails here when WindowQuotaOptions gains an option this does not try.
  const cases = {
    // @ts-expect-error quota with limit
    limit: () => rateLimit({ quota, limit: 100 }),
    // @ts-expect-error quota with windowMs
    windowMs: () => rateLimit({ quota, windowMs: 1000 }),
    // @ts-expect-error quota with policy
    policy: () => rateLimit({ quota, policy: 'api' }),
    // @ts-expect-error quota with clients
    clients: () => rateLimit({ quota, clients: 100 }),
    // @ts-expect-error quota with hashes
    hashes: () => rateLimit({ quota, hashes: 2 }),
    // @ts-expect-error quota with slots
    slots: () => rateLimit({ quota, slots: 64 }),
    // @ts-expect-error quota with seed
    seed: () => rateLimit({ quota, seed: 1n }),
    // @ts-expect-error quota with clock
    clock: () => rateLimit({ quota, clock: new ManualClock() }),
    // @ts-expect-error quota with heavyHitters
    heavyHitters: () => rateLimit({ quota, heavyHitters: false }),
    // @ts-expect-error quota with rate
    rate: () => rateLimit({ quota, rate }),
  } satisfies Record<keyof WindowQuotaOptions, () => unknown>;
  for (const [name, make] of Object.entries(cases)) throwsShape(t, make, pair('quota', name, QUOTA));
});

test(
  title('a rate beside an option that shapes, seeds or times a sketch is refused by the types and at run time'),
  (t) => {
    const rate = new Rate({ intervalMs: 1000 });
    t.teardown(() => rate.close());
    const cases = {
      // @ts-expect-error rate with clients
      clients: () => rateLimit({ ...window, rate, clients: 100 }),
      // @ts-expect-error rate with hashes
      hashes: () => rateLimit({ ...window, rate, hashes: 2 }),
      // @ts-expect-error rate with slots
      slots: () => rateLimit({ ...window, rate, slots: 64 }),
      // @ts-expect-error rate with seed
      seed: () => rateLimit({ ...window, rate, seed: 1n }),
      // @ts-expect-error rate with clock
      clock: () => rateLimit({ ...window, rate, clock: new ManualClock() }),
    };
    for (const [name, make] of Object.entries(cases)) throwsShape(t, make, pair('rate', name, RATE));
  },
);

test(title('an UpstreamLimit beside any option of a new one is refused by the types and at run time'), (t) => {
  const limit = new UpstreamLimit({ max: 2 });
  t.teardown(() => limit.close());
  // `satisfies`: tsc fails here when UpstreamLimitOptions gains an option this does not try.
  const cases = {
    // @ts-expect-error limit with max
    max: () => upstreamLimit({ limit, max: 2 }),
    // @ts-expect-error limit with inflight
    inflight: () => upstreamLimit({ limit, inflight: new Inflight() }),
    // @ts-expect-error limit with perClient
    perClient: () => upstreamLimit({ limit, perClient: 1 }),
    // @ts-expect-error limit with clientInflight
    clientInflight: () => upstreamLimit({ limit, clientInflight: new Inflight() }),
  } satisfies Record<keyof UpstreamLimitOptions, () => unknown>;
  for (const [name, make] of Object.entries(cases)) throwsShape(t, make, pair('limit', name, LIMIT));
});

test(
  title('options a new quota or limit lacks, and options only another makes sense with, are refused by both'),
  (t) => {
    const rate = new Rate({ intervalMs: 1000 });
    const clientInflight = new Inflight();
    t.teardown(() => {
      rate.close();
      clientInflight.close();
    });
    const refused = (make: () => unknown, message: RegExp): void =>
      throwsShape(t, make, { instanceOf: TypeError, code: 'ERR_INVALID_ARG_TYPE', message });
    // @ts-expect-error a new quota without its limit
    refused(() => rateLimit({ windowMs: 1000 }), /The "limit" option must be of type number/);
    // @ts-expect-error a new quota without its window
    refused(() => rateLimit({ limit: 5 }), /The "windowMs" option must be of type number/);
    // @ts-expect-error a rate keeps no heavy hitters
    refused(() => rateLimit({ ...window, rate, heavyHitters: true }), /The "heavyHitters" option must be false/);
    // @ts-expect-error a new upstream limit without its max
    refused(() => upstreamLimit({ upstream: () => 'a' }), /The "max" option must be of type number/);
    // @ts-expect-error clientInflight counts what perClient caps: not without it
    refused(() => upstreamLimit({ max: 2, clientInflight }), /The "clientInflight" option must be given only with/);
  },
);

test(title('the Fastify hooks and plugin refuse the same pairs, in their types and at run time'), async (t) => {
  const quota = new WindowQuota(window);
  const rate = new Rate({ intervalMs: 1000 });
  const limit = new UpstreamLimit({ max: 2 });
  t.teardown(() => {
    quota.close();
    rate.close();
    limit.close();
  });
  // @ts-expect-error quota with limit
  throwsShape(t, () => rateLimitHook({ quota, limit: 100 }), pair('quota', 'limit', QUOTA));
  // @ts-expect-error rate with seed
  throwsShape(t, () => rateLimitHook({ ...window, rate, seed: 1n }), pair('rate', 'seed', RATE));
  // @ts-expect-error limit with perClient
  throwsShape(t, () => upstreamLimitHook({ limit, perClient: 1 }), pair('limit', 'perClient', LIMIT));
  const app = Fastify();
  t.teardown(() => app.close());
  // @ts-expect-error quota with windowMs
  app.register(keepcountFastify, { rateLimit: { quota, windowMs: 1000 } });
  await rejectsShape(t, Promise.resolve(app.ready()), pair('quota', 'windowMs', QUOTA));
});

test(title('every combination the parsers take compiles and makes a middleware'), async (t) => {
  const quota = new WindowQuota(window);
  const rate = new Rate({ intervalMs: 1000 });
  const limit = new UpstreamLimit({ max: 2 });
  const [inflight, clientInflight] = [new Inflight(), new Inflight()];
  const key = (req: Request): string => req.ip ?? '';
  const base: RateLimitOptions = window;
  const quotas = [
    rateLimit({ quota, headers: false, trustProxy: 1, ipv6Subnet: 64, key, onLimit: (_req, res) => res.end() }),
    // An option given as `undefined` is not given, to the parsers and so to the types.
    rateLimit({ quota, limit: undefined, rate: undefined }),
    rateLimit({ ...base, policy: 'api', clients: 10, hashes: 2, slots: 64, seed: 1n, clock: new ManualClock() }),
    rateLimit({ ...window, rate, heavyHitters: false, policy: 'shared', clients: undefined }),
    rateLimitHook({ quota }),
    rateLimitHook({ ...window, rate, heavyHitters: false }),
  ];
  const limits = [
    upstreamLimit({ limit, max: undefined, upstream: () => 'a', key, trustProxy: 1, ipv6Subnet: 64 }),
    upstreamLimit({ max: 2, inflight, perClient: 1, clientInflight }),
    upstreamLimitHook({ limit }),
  ];
  const app = Fastify();
  app.register(keepcountFastify, { rateLimit: { quota }, upstreamLimit: { max: 2 } });
  await t.notThrowsAsync(app.ready());
  await app.close();
  // What the middleware made from options is its to close; what it was given is ours.
  for (const m of quotas) if (m.quota !== quota) (m.quota as WindowQuota).close();
  for (const m of limits) if (m.limit !== limit) m.limit.close();
  for (const given of [quota, rate, limit, inflight, clientInflight]) given.close();
});

/** Compiles only when `A` and `B` are the same type (each assignable to the other, `any` not). */
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
const same = <A, B>(_proof: Same<A, B>): void => undefined;

/** A quota of the caller's own, with a method no `WindowQuota` has. */
class CountingQuota implements RequestQuota {
  consumed = 0;
  consume(key: string): RateLimitDecision {
    this.consumed++;
    return { key, allowed: true, limit: 5, count: 1, remaining: 4, resetMs: 1000, policy: 'own', windowMs: 1000 };
  }
  reset(): void {
    this.consumed = 0;
  }
}

test(title('a rate limit carries its quota typed as what was built or given'), (t) => {
  // Made from options: a WindowQuota, with its own stats() and topTalkers (no optional call).
  const made = rateLimit(window);
  const hook = rateLimitHook({ ...window, policy: 'hook' });
  const own = new CountingQuota();
  const given = rateLimit({ quota: own });
  const givenHook = rateLimitHook({ quota: own });
  const windowQuota = new WindowQuota(window);
  const shared = rateLimit({ quota: windowQuota, key: (req: Request) => req.ip ?? '' });
  t.teardown(() => {
    made.quota.close();
    hook.quota.close();
    windowQuota.close();
  });
  same<typeof made.quota, WindowQuota>(true);
  same<typeof hook.quota, WindowQuota>(true);
  same<typeof given.quota, CountingQuota>(true);
  same<typeof givenHook.quota, CountingQuota>(true);
  same<typeof shared.quota, WindowQuota>(true);
  same<Parameters<typeof shared>[0], Request>(true);
  t.is(shared.quota, windowQuota);
  t.is(made.quota.stats()?.overflowEvents, 0);
  t.deepEqual(made.quota.topTalkers(3), []);
  t.deepEqual(hook.quota.topTalkers(3, 'both'), []);
  given.quota.reset();
  t.is(givenHook.quota.consumed, 0);
  // @ts-expect-error a quota of one's own has no stats(): it is not typed a WindowQuota
  t.throws(() => given.quota.stats());
  // Annotations without the parameter take any rate limit, as before.
  const any: RateLimitMiddleware[] = [made, given];
  const hooks: QuotaTalkers[] = [hook, givenHook];
  t.is(any.length + hooks.length, 4);
  // A parameter that contradicts the options: a made quota is a WindowQuota, nothing else.
  // @ts-expect-error new-quota options with another quota type
  t.throws(() => rateLimit<IncomingMessage, ServerResponse, CountingQuota>(window).quota.reset());
});
