/**
 * The quota that count-mode nodes (`fixtures/redis-node.ts`) count every key exactly on, and that
 * `redis-nodes.ts` reads their totals back from: one fixed window (a clock mid-window), a limit
 * no count reaches, and every key tracked from its first request.
 */
export const EXACT_QUOTA = {
  limit: Number.MAX_SAFE_INTEGER,
  windowMs: 86_400_000,
  clock: { now: (): number => 43_200_000 },
  heavyHitters: { threshold: 1 },
};
