import test from 'ava';
import { rateLimitHeaders, type RateLimitDecision } from '../lib/http/index.js';
import { title } from './helpers.js';

const decision = (over: Partial<RateLimitDecision>): RateLimitDecision => ({
  allowed: true,
  policy: 'default',
  limit: 100,
  count: 1,
  remaining: 99,
  resetMs: 1500,
  windowMs: 60_000,
  key: 'k',
  ...over,
});

test(title('rateLimitHeaders formats each decision of quotas used in turn'), (t) => {
  // Policy fields are remembered between calls: alternating quotas must never see another's.
  for (let round = 0; round < 2; round++) {
    t.deepEqual(rateLimitHeaders(decision({})), {
      'RateLimit-Policy': '"default";q=100;w=60',
      RateLimit: '"default";r=99;t=2',
    });
    t.deepEqual(rateLimitHeaders(decision({ policy: 'a "b"\\c', limit: 5, windowMs: 1001, remaining: 0 })), {
      'RateLimit-Policy': '"a \\"b\\"\\\\c";q=5;w=2',
      RateLimit: '"a \\"b\\"\\\\c";r=0;t=2',
    });
    t.deepEqual(rateLimitHeaders(decision({ limit: 7, allowed: false, remaining: 0, resetMs: 1 })), {
      'RateLimit-Policy': '"default";q=7;w=60',
      RateLimit: '"default";r=0;t=1',
      'Retry-After': '1',
    });
    t.deepEqual(rateLimitHeaders(decision({ windowMs: 1000, allowed: false, resetMs: 0 })), {
      'RateLimit-Policy': '"default";q=100;w=1',
      RateLimit: '"default";r=99;t=0',
      'Retry-After': '1',
    });
  }
});

test(title('rateLimitHeaders gives every decision its own RateLimit value, whatever came before'), (t) => {
  // The values are cached by remaining count: counts 64 apart share a slot, and a slot must never
  // answer for another count, another second or another policy. Counts past 2^31 and past the
  // largest sf-integer (sent as 10^15 - 1) land in slots too.
  const counts = [0, 1, 63, 64, 65, 127, 128, 2 ** 31 - 1, 2 ** 31, 2 ** 31 + 64, 999_999_999_999_999, 2 ** 53 - 1];
  const policies = ['default', 'other', 'a "b"'];
  let seed = 7;
  const random = (n: number): number => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed % n;
  };
  for (let i = 0; i < 5_000; i++) {
    const remaining = counts[random(counts.length)]!;
    const resetMs = random(4) * 1000 + random(2);
    const policy = policies[random(policies.length)]!;
    const name = `"${policy.replace(/"/g, '\\"')}"`;
    const sent = Math.min(remaining, 999_999_999_999_999);
    const headers = rateLimitHeaders(decision({ remaining, resetMs, policy, limit: 2 ** 53 - 1 }));
    if (headers.RateLimit !== `${name};r=${sent};t=${Math.ceil(resetMs / 1000)}`) {
      t.fail(`decision ${i} (remaining ${remaining}, resetMs ${resetMs}, ${policy}): ${headers.RateLimit}`);
      return;
    }
  }
  t.pass();
});
