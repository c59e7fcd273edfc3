/**
 * The errors of a {@link RedisSync} and of the structures on it: the `ERR_KEEPCOUNT_SYNC` of a
 * failed call, which names the structures it carried, since in a cluster a sync's calls fail one
 * by one; and the `ERR_KEEPCOUNT_CLOSED` of a count that no sync would push.
 *
 * @module
 */
import { withCode, type KeepcountError } from '../errors.js';

/** A coded error naming the structures of a failed call: `names`. */
export type SyncError = KeepcountError & { names?: string[] };

/**
 * The `ERR_KEEPCOUNT_CLOSED` error of a synced structure counted after its `close()`: it would
 * never be pushed.
 */
export function closedSyncedError(what: string): KeepcountError {
  return withCode(
    new Error(`This ${what} was closed: it counts no more (what it counted before goes with the next sync)`),
    'ERR_KEEPCOUNT_CLOSED',
  );
}

/**
 * The `ERR_KEEPCOUNT_CLOSED` error of a synced structure counted after its sync's `close()`: no
 * sync would ever push the count, so the fleet would never see it.
 */
export function syncClosedError(what: string): KeepcountError {
  return withCode(
    new Error(`The RedisSync of this ${what} was closed: it counts no more, since no sync would push the count`),
    'ERR_KEEPCOUNT_CLOSED',
  );
}

/** The `ERR_KEEPCOUNT_SYNC` error of a call that timed out; naming its structures in a cluster. */
export function timeoutError(ms: number, names: string[], cluster: boolean): SyncError {
  const of = cluster ? ` for ${listNames(names)}` : '';
  return Object.assign(withCode(new Error(`Redis sync timed out after ${ms} ms${of}`), 'ERR_KEEPCOUNT_SYNC'), {
    names,
  });
}

/**
 * A failed call's error as reported: one with a keepcount code as it is, anything else (a client's
 * rejection: MOVED, TRYAGAIN, CLUSTERDOWN, a lost connection) as an `ERR_KEEPCOUNT_SYNC` error
 * naming the call's structures, the original as its `cause`.
 */
export function syncError(error: unknown, names: string[]): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && code.startsWith('ERR_KEEPCOUNT_')) {
    // An unexpected reply (reply.ts) names its call's structures too.
    if (code === 'ERR_KEEPCOUNT_SYNC' && (error as SyncError).names === undefined)
      Object.assign(error as object, { names });
    return error;
  }
  const message = error instanceof Error ? error.message : describeReason(error);
  const wrapped = withCode(
    new Error(`Redis sync of ${listNames(names)} failed: ${message}`, { cause: error }),
    'ERR_KEEPCOUNT_SYNC',
  );
  return Object.assign(wrapped, { names });
}

/** The names in an error's message: the first few, and how many more. */
function listNames(names: string[]): string {
  const shown = names.slice(0, 5).map((name) => JSON.stringify(name));
  if (names.length > shown.length) shown.push(`and ${names.length - shown.length} more`);
  return shown.join(', ');
}

/**
 * A rejection reason that is not an `Error`, as text: `String()` throws for some (an object with
 * no prototype), and a throw while reporting a failed call would reject `flush()`, which the
 * timer does not catch.
 */
function describeReason(reason: unknown): string {
  try {
    return String(reason);
  } catch {
    return Object.prototype.toString.call(reason);
  }
}
