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
