/**
 * Every error keepcount throws carries a stable `code`:
 *
 * - `ERR_INVALID_ARG_TYPE` (`TypeError`): an argument or option has the wrong type, e.g. a key that
 *   is not a string, number, bigint or Uint8Array.
 * - `ERR_OUT_OF_RANGE` (`RangeError`): a number is outside its documented range: a zero, negative,
 *   fractional or too large size, a non-finite or non-safe-integer count, a key number that is not
 *   a safe integer or a bigint outside i64.
 * - `ERR_KEEPCOUNT_MISMATCH` (`Error`): `merge` of sketches whose hashes, slots or seed differ; or
 *   `openShared` of a segment that exists with another kind, shape, seed or interval, or that
 *   another keepcount version made (another layout: unlink it once no process of that version
 *   has it open), or for `Limiter.openShared` another quota, best-effort quota or capacity, or
 *   `fromSharedBuffer` options that differ from the buffer's, or a buffer of another layout (the
 *   message names the first field that differs).
 * - `ERR_KEEPCOUNT_CORRUPT` (`Error`): `Estimator.deserialize` input that is not a valid version-3
 *   sketch, or an `openShared` segment file or a `fromSharedBuffer` buffer whose header is damaged
 *   or not keepcount's; the message says which check failed.
 * - `ERR_KEEPCOUNT_IO` (`Error`): the system refused a shared segment's file or directory (missing
 *   directory, permissions, a symlink in its place); the message has the path and the system's
 *   reason.
 * - `ERR_KEEPCOUNT_FULL` (`Error`): `Inflight.openShared` found every process slot of the segment
 *   held by a live process (open it with a larger `processes`, after unlinking it).
 * - `ERR_KEEPCOUNT_RELEASED` (`Error`): `incr()` on an Inflight guard that was already released.
 * - `ERR_KEEPCOUNT_CLOSED` (`Error`): a method of an `Estimator`, a `Rate` or a shared `Limiter` called
 *   after its `close()`; or a count on a keepcount/redis `SyncedEstimator`, `SyncedRate` or
 *   `SyncedWindowQuota` or `SyncedInflight` after its `close()` (its reads still answer).
 * - `ERR_KEEPCOUNT_UNINITIALIZED` (`Error`): a keepcount/http `KeepcountStore` used before
 *   express-rate-limit called its `init()` (the store was not passed to express-rate-limit). An
 *   `init()` that threw instead makes every later call throw that error, with its own code.
 * - `ERR_KEEPCOUNT_BACKEND` (`Error`): `KEEPCOUNT_BACKEND` names an unknown backend, or forces
 *   `native` where the binding cannot load (the load error is the `cause`).
 * - `ERR_KEEPCOUNT_TIMEOUT` ({@link TimeoutError}): `timeout()` ran out of time.
 * - `ERR_KEEPCOUNT_DUPLICATE_KEY` (`Error`): a `Limiter` key table names the same key twice (`1` and
 *   `1n` are one key); the limiter is unchanged. Or a keepcount/redis structure made on a
 *   `RedisSync` that already carried one of its kind and name (closed or not): both would write
 *   this node's one contribution in Redis. Or a `KeepcountMetrics` whose metric names the
 *   registry already holds.
 * - `ERR_KEEPCOUNT_UNKNOWN_KEY` (`Error`): `Limiter.setQuota` for a key not in the table.
 * - `ERR_KEEPCOUNT_UNSUPPORTED` (`Error`): an option keepcount cannot honour, e.g. @fastify/rate-limit's
 *   `continueExceeding` or `exponentialBackoff` with the keepcount store (its window is shared by all keys),
 *   or a 17th distinct `timeWindow` there (one window each, 16 at most);
 *   or `openShared`/`unlink` where counters cannot be shared between processes: on the TypeScript
 *   fallback, or on a system other than Linux or macOS; `Limiter.openShared` on a CPU without a
 *   lock-free 128-bit compare-and-swap.
 * - `ERR_KEEPCOUNT_SYNC` (`Error`): emitted, never thrown, by keepcount/redis' `RedisSync` on its
 *   `'error'` event when a sync's call timed out, the Redis client rejected it (MOVED, TRYAGAIN,
 *   CLUSTERDOWN, a lost connection, whatever its `code`, a sender wrapped in `timeout()` too: the
 *   client's error is its `cause`), or Redis answered something other than the script's reply. Its
 *   `names` property lists the structures the call carried.
 * - `ERR_KEEPCOUNT_FOREIGN_KEY` (`Error`): emitted, never thrown, on the same `'error'` event when a
 *   sync found a key under its prefix holding a Redis type keepcount never writes there (another
 *   writer shares the prefix; its `key` property names the key). The sync deleted it and went on,
 *   and the structure rebuilt what it held, as after Redis lost the key.
 * - `ERR_KEEPCOUNT_LAYOUT` (`Error`): emitted, never thrown, on the same `'error'` event when nodes
 *   made with another seed, shape or sketch format sync a structure of the same name: they would
 *   count one key in other cells, so the two groups count apart. Its `key` names this node's entry,
 *   `layout` and `theirs` the two layouts. Once per other layout, until that one stops syncing.
 * - `ERR_KEEPCOUNT_NODE_ID` (`Error`): emitted, never thrown, on the same `'error'` event when Redis
 *   holds a later sync of this node's `nodeId` than its own: another process syncs under the same
 *   id, or this one reuses the id of one that synced before it. The sync fails (nothing of it is
 *   applied) until the ids differ or the other process's keys expire.
 * - `ERR_KEEPCOUNT_CALLBACK` (`Error`): handed to Express's `next` (never thrown) when a function given
 *   to a keepcount/http middleware (`key`, `skip`, `cost`, `upstream`, `onLimit`) threw or rejected
 *   with a value Express would take for going on (`undefined`, `null`, `0`, `''`, `false`,
 *   `'route'`, `'router'`); the value is its `cause`.
 * - `ERR_KEEPCOUNT_INTERNAL` (`Error`): a bug in keepcount, never bad input: an N-API call the native
 *   backend makes failed, or its Rust code panicked. The panic is caught and thrown as this error
 *   rather than aborting the process; please report it.
 *
 * @module
 */

/** The `code` of every error keepcount throws. */
export type ErrorCode =
  | 'ERR_INVALID_ARG_TYPE'
  | 'ERR_OUT_OF_RANGE'
  | 'ERR_INCOMPATIBLE_OPTION_PAIR'
  | 'ERR_KEEPCOUNT_MISMATCH'
  | 'ERR_KEEPCOUNT_CORRUPT'
  | 'ERR_KEEPCOUNT_IO'
  | 'ERR_KEEPCOUNT_FULL'
  | 'ERR_KEEPCOUNT_RELEASED'
  | 'ERR_KEEPCOUNT_CLOSED'
  | 'ERR_KEEPCOUNT_UNINITIALIZED'
  | 'ERR_KEEPCOUNT_BACKEND'
  | 'ERR_KEEPCOUNT_TIMEOUT'
  | 'ERR_KEEPCOUNT_DUPLICATE_KEY'
  | 'ERR_KEEPCOUNT_UNKNOWN_KEY'
  | 'ERR_KEEPCOUNT_UNSUPPORTED'
  | 'ERR_KEEPCOUNT_SYNC'
  | 'ERR_KEEPCOUNT_FOREIGN_KEY'
  | 'ERR_KEEPCOUNT_NODE_ID'
  | 'ERR_KEEPCOUNT_LAYOUT'
  | 'ERR_KEEPCOUNT_CALLBACK'
  | 'ERR_KEEPCOUNT_INTERNAL';

/** An error with a keepcount {@link ErrorCode}. */
export type KeepcountError<E extends Error = Error> = E & { readonly code: ErrorCode };

/** Rejection reason of {@link timeout} when the time runs out. */
export class TimeoutError extends Error {
  /** Always `'ERR_KEEPCOUNT_TIMEOUT'`. */
  readonly code = 'ERR_KEEPCOUNT_TIMEOUT';
  /** The `ms` the timeout was given. */
  readonly timeoutMs: number;

  constructor(timeoutMs: number) {
    super(`Timed out after ${timeoutMs} ms`);
    this.name = 'TimeoutError';
    this.timeoutMs = timeoutMs;
  }
}

export function withCode<E extends Error>(error: E, code: ErrorCode): KeepcountError<E> {
  return Object.defineProperty(error, 'code', {
    value: code,
    enumerable: true,
    configurable: true,
    writable: true,
  }) as KeepcountError<E>;
}

/** Describes a received value the way Node's own argument errors do. */
export function describe(value: unknown): string {
  switch (typeof value) {
    case 'number':
      return Object.is(value, -0) ? '-0' : String(value);
    case 'bigint':
      return `${value}n`;
    case 'string':
      return `type string (${JSON.stringify(value.length > 28 ? `${value.slice(0, 25)}...` : value)})`;
    case 'undefined':
      return 'undefined';
    case 'function':
      return `function ${value.name || '<anonymous>'}`;
    case 'object':
      if (value === null) return 'null';
      return `an instance of ${(value.constructor as { name?: string } | undefined)?.name ?? 'Object'}`;
    default:
      return `type ${typeof value} (${String(value)})`;
  }
}

/** `TypeError` `ERR_INVALID_ARG_TYPE`: `what` is e.g. `The "key" argument`. */
export function invalidType(what: string, expected: string, received: unknown): KeepcountError<TypeError> {
  return withCode(new TypeError(`${what} must be ${expected}. Received ${describe(received)}`), 'ERR_INVALID_ARG_TYPE');
}

/** `RangeError` `ERR_OUT_OF_RANGE`. */
export function outOfRange(what: string, expected: string, received: unknown): KeepcountError<RangeError> {
  return withCode(new RangeError(`${what} must be ${expected}. Received ${describe(received)}`), 'ERR_OUT_OF_RANGE');
}
