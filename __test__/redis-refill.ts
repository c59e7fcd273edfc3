/**
 * A bucket refill of one token an hour: none within a test, so tokens count as exactly as an
 * allowance's, yet not an allowance (`perSecond: 0`), to which a `SyncedLimiter` lends no credit on
 * a key with no loan (lib/redis/limiter.ts). For the tests of that credit.
 */
export const HOURLY = { amount: 1, periodMs: 3_600_000 } as const;
