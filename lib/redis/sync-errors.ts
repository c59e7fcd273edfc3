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

/**
 * The errors a sync made itself for a failed call ({@link callError}), which it reports as they
 * are. Marked, not told by their `code`: a client's rejection may carry any code (a sender wrapped
 * in keepcount's own `timeout()` rejects with `ERR_KEEPCOUNT_TIMEOUT`), be frozen, or throw from
 * a getter, and it still goes out wrapped, unread and unchanged.
 */
const ours = new WeakSet<object>();

/** Marks `error`, made by the sync for a failed call, to go out as it is ({@link syncError}). */
export function callError<E extends Error>(error: E): E {
  ours.add(error);
  return error;
}

/** The `ERR_KEEPCOUNT_SYNC` error of a call that timed out; naming its structures in a cluster. */
export function timeoutError(ms: number, names: string[], cluster: boolean): SyncError {
  const of = cluster ? ` for ${listNames(names)}` : '';
  const error = withCode(new Error(`Redis sync timed out after ${ms} ms${of}`), 'ERR_KEEPCOUNT_SYNC');
  return callError(Object.assign(error, { names }));
}

/**
 * A failed call's error as reported: one the sync made for it ({@link callError}: a timeout, an
 * unexpected reply, `ERR_KEEPCOUNT_NODE_ID`) as it is, an `ERR_KEEPCOUNT_SYNC` one naming the
 * call's structures in `names`; anything else (a client's rejection: MOVED, TRYAGAIN, CLUSTERDOWN,
 * a lost connection, whatever its `code`) as a new `ERR_KEEPCOUNT_SYNC` error naming them, the
 * original as its `cause`. Never throws, and never changes the client's value.
 */
export function syncError(error: unknown, names: string[]): Error {
  if (ours.has(error as object)) {
    const own = error as SyncError;
    // An unexpected reply (reply.ts) names its call's structures too.
    if (own.code === 'ERR_KEEPCOUNT_SYNC') own.names ??= names;
    return own;
  }
  return failedCallError(names, error, describeReason(error));
}

/**
 * A new `ERR_KEEPCOUNT_SYNC` error of a call of `names` that failed with `cause`, which `reason`
 * describes.
 */
export function failedCallError(names: string[], cause: unknown, reason: string): SyncError {
  const error = withCode(
    new Error(`Redis sync of ${listNames(names)} failed: ${reason}`, { cause }),
    'ERR_KEEPCOUNT_SYNC',
  );
  return Object.assign(error, { names });
}

/** The names in an error's message: the first few, and how many more. */
function listNames(names: string[]): string {
  const shown = names.slice(0, 5).map((name) => JSON.stringify(name));
  if (names.length > shown.length) shown.push(`and ${names.length - shown.length} more`);
  return shown.join(', ');
}

/**
 * A rejection reason as text: an `Error`'s message, anything else's `String()`. Reading either may
 * throw (a getter, an object with no prototype, a `Proxy`), and a throw while reporting a failed
 * call would reject `flush()`, which the timer does not catch.
 */
function describeReason(reason: unknown): string {
  try {
    return String(reason instanceof Error ? reason.message : reason);
  } catch {
    try {
      return Object.prototype.toString.call(reason);
    } catch {
      return `a ${typeof reason} with no string form`;
    }
  }
}
