/** What a synced quota or limiter does while its node's view is stale. */
import { invalidType } from '../errors.js';

/**
 * What a node does while its view is stale (no successful sync for `staleAfterMs`: Redis down,
 * stopped or slow):
 * - `'local'`: each node admits at most its share of the limit on its own, the limit divided by the
 *   most nodes Redis counted lately (a higher count held for 10 of the node's syncs, the registry's
 *   lifetime, after it and after the last count that may have followed a loss of registrations:
 *   a new incarnation, or a count at most half the last), not by the last count alone, which
 *   drops while the nodes register again one at a time after Redis lost the registry (a
 *   `SyncedWindowQuota`: `limit / nodes` of its own requests per window, at least 1 when `limit`
 *   is, and it still refuses what the last known global count refuses; a `SyncedLimiter`: a
 *   bucket of `rate / nodes` and `burst / nodes` per key, starting from what the node could still
 *   admit on a live loan, empty for a key without one, and owing what it admits, as credit). The
 *   fleet stays within about the limit (up to `nodes` a window when `limit < nodes`) when every
 *   node is cut off; a quota with `heavyHitters` admits up to `threshold − 1` more per node, since
 *   a node's exact count of a client leaves out what it saw before counting it exactly. A node whose
 *   sync never reached Redis refuses, as `'closed'`: it knows no node count but its own, and every
 *   node started while Redis was away would take the whole limit (burst) per key for its share.
 * - `'open'`: a `SyncedWindowQuota` decides on the last known global count plus this node's own
 *   (the fleet can admit up to `nodes × limit` in a window); a `SyncedLimiter` admits everything.
 * - `'closed'`: refuses every request until a sync succeeds.
 */
export type FailPolicy = 'local' | 'open' | 'closed';

const FAIL_POLICIES: readonly FailPolicy[] = ['local', 'open', 'closed'];

/** The `failPolicy` option, checked; defaults to `'local'`. */
export function failPolicyOption(value: unknown): FailPolicy {
  const policy = value ?? 'local';
  if (!FAIL_POLICIES.includes(policy as FailPolicy)) {
    throw invalidType('The "failPolicy" option', "one of 'local', 'open', 'closed'", policy);
  }
  return policy as FailPolicy;
}
