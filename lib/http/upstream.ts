/** Protection for calls to upstreams: an in-flight cap per upstream and a deadline per call. */
import { closedError, dispose } from '../closed.js';
import { invalidType, TimeoutError } from '../errors.js';
import { Inflight, type InflightCounter, type InflightGuard } from '../inflight.js';
import { integerOption, optionsObject } from '../options.js';
import { syncResult } from './sync-result.js';
import { timeout, timeoutSignal } from '../timeout.js';

/** Options of {@link UpstreamLimit}. */
export interface UpstreamLimitOptions {
  /** Calls allowed in flight per upstream key at once: an integer >= 1. Required. */
  max: number;
  /**
   * The counter to use, e.g. one shared by several limits, `Inflight.openShared(...)` for every
   * process of a host, or keepcount/redis' `SyncedInflight` for every machine. Defaults to a new
   * `Inflight()`.
   */
  inflight?: InflightCounter;
  /**
   * Calls one client may have in flight per upstream at once: an integer >= 1, counted for the
   * clients that {@link UpstreamLimit.acquire} and {@link UpstreamLimit.enter} are given: exactly,
   * in this process, unless `clientInflight` is given. Defaults to none. Without it, one client
   * that opens `max` slow connections holds every slot of the upstream, and everyone else gets
   * 503: until the server's `requestTimeout` for a body sent a byte at a time, and for an answer
   * read slowly until the client leaves (`requestTimeout` ends once the request has arrived; only
   * a write deadline in the handler bounds it). A slot from `acquire` that is never
   * released keeps its client counted for good: the guard's garbage-collection net gives back only
   * the upstream's count.
   */
  perClient?: number;
  /**
   * Where the per-client counts of `perClient` are kept. Defaults to an exact map in this process,
   * so with several processes (node:cluster, PM2) or machines a client may hold `perClient` calls
   * in each. Give a counter they share, `Inflight.openShared(name, …)` for the processes of a host
   * or keepcount/redis' `SyncedInflight` for machines, to hold one client to `perClient` across all
   * of them. Its counts are sketch estimates: never low, so a client is refused early when other
   * clients' calls in flight share every one of its counters, never late (see the README for the
   * bound); a synced one's are as fresh as its syncs. The limit never closes it. Only with
   * `perClient`.
   */
  clientInflight?: InflightCounter;
}

/** What {@link UpstreamLimit.acquire} returns. */
export interface UpstreamSlot {
  /** True when the call may go ahead; false when it is over `max` (already released then). */
  allowed: boolean;
  /**
   * The upstream's estimated in-flight count including this call; when the client was refused by
   * `perClient`, the count without it (the upstream was not counted).
   */
  count: number;
  /**
   * The client's calls to this upstream in flight including this one (exact, or the
   * `clientInflight` counter's estimate), when a client was given and the limit has `perClient`;
   * else 0. Above `perClient`: refused for the client.
   */
  clientCount: number;
  /** Gives the slot back; idempotent. Call it on every path. */
  release(): void;
}

/**
 * pingora's connection limit: count calls in flight per upstream and refuse the one that takes
 * the count above `max` (the HTTP adapters answer 503), so a slow upstream backs up only its own
 * traffic. The count is a count-min sketch estimate: never low, so it can refuse early when busy
 * upstreams collide in every row, never late.
 *
 * @example
 * ```ts
 * const limit = new UpstreamLimit({ max: 50 });
 * const slot = limit.acquire('payments');
 * if (!slot.allowed) return res.writeHead(503).end();
 * try { await callPayments(); } finally { slot.release(); }
 * ```
 */
export class UpstreamLimit implements Disposable {
  /** Calls allowed in flight per upstream key. */
  readonly max: number;
  /** Calls one client may have in flight per upstream key; `Infinity` when not capped. */
  readonly perClient: number;
  /** The counter; `inflight.get(key)` is the current count. */
  readonly inflight: InflightCounter;
  /** Acquisitions allowed and refused since construction, for metrics. */
  #allowed = 0;
  #refused = 0;
  /** The counter when it counts in and out without guards, for {@link enter}; decided once. */
  readonly #pairs: InflightPairs | undefined;
  /** Per upstream and client with calls in flight, how many: only while some are, so at most one entry per call in flight. */
  readonly #clients = new Map<string, number>();
  /** The `clientInflight` counter that replaces {@link #clients}, if given. */
  readonly #clientCounter: InflightCounter | undefined;
  /** {@link #clientCounter} when it counts in and out without guards. */
  readonly #clientPairs: InflightPairs | undefined;
  /** Whether the limit made {@link inflight} (and closes it on {@link close}), rather than being given one. */
  readonly #owned: boolean;
  /** True once {@link close} ran: no call is counted in any more. */
  #closed = false;

  constructor(options: UpstreamLimitOptions) {
    const o = optionsObject(options);
    this.max = integerOption('max', o.max, 1, Number.MAX_SAFE_INTEGER);
    this.perClient =
      o.perClient === undefined ? Infinity : integerOption('perClient', o.perClient, 1, Number.MAX_SAFE_INTEGER);
    this.#owned = o.inflight === undefined;
    this.inflight = inflightOption(o.inflight);
    this.#pairs = hasPairs(this.inflight) ? this.inflight : undefined;
    if (o.clientInflight !== undefined) {
      if (this.perClient === Infinity) {
        throw invalidType('The "clientInflight" option', 'given only with "perClient"', o.clientInflight);
      }
      const counter = counterOption('clientInflight', o.clientInflight);
      this.#clientCounter = counter;
      this.#clientPairs = hasPairs(counter) ? counter : undefined;
    }
  }

  /**
   * Counts a call to `key` in, for `client` if given (see {@link UpstreamLimitOptions.perClient});
   * see {@link UpstreamSlot}.
   */
  acquire(key: string, client?: string): UpstreamSlot {
    if (this.#closed) throw closedError('UpstreamLimit');
    checkKey(key);
    const held = this.#holdClient(key, client);
    if (held !== undefined && held.refused) return this.#refuseClient(key, held.count);
    let guard, count;
    try {
      [guard, count] = guardPair('The "inflight" option\'s incr() result', this.inflight.incr(key));
    } catch (error) {
      throw this.#letGo(held, error);
    }
    const allowed = count <= this.max;
    if (allowed) this.#allowed++;
    else {
      this.#refused++;
      // The client goes out even if the counter's guard fails to.
      try {
        guard.release();
      } finally {
        if (held !== undefined) this.#dropClient(held);
      }
    }
    const clientCount = held?.count ?? 0;
    if (held === undefined) return { allowed, count, clientCount, release: releaser(guard) };
    let holding = allowed;
    const release = (): void => {
      guard.release();
      if (!holding) return;
      holding = false;
      this.#dropClient(held);
    };
    return { allowed, count, clientCount, release };
  }

  /**
   * {@link acquire} for callers certain to release the slot on every path, e.g. when a request's
   * exchange ends (the HTTP adapters): the count goes in through the counter's `enter` when it has
   * one (`Inflight` and `SyncedInflight` do), with no guard object and no garbage-collection safety
   * net, so a slot never released holds its count for good. About a third of `acquire`'s cost on
   * either backend. A counter with only `incr` and `get` is acquired as by {@link acquire}.
   */
  enter(key: string, client?: string): UpstreamSlot {
    const counter = this.#pairs;
    if (counter === undefined) return this.acquire(key, client);
    if (this.#closed) throw closedError('UpstreamLimit');
    checkKey(key);
    const held = this.#holdClient(key, client);
    if (held !== undefined && held.refused) return this.#refuseClient(key, held.count);
    let count;
    try {
      count = syncResult('The "inflight" option\'s enter() result', counter.enter(key));
    } catch (error) {
      throw this.#letGo(held, error);
    }
    const allowed = count <= this.max;
    let holding = allowed;
    if (allowed) this.#allowed++;
    else {
      this.#refused++;
      counter.leave(key);
      if (held !== undefined) this.#dropClient(held);
    }
    const release = (): void => {
      if (!holding) return;
      holding = false;
      counter.leave(key);
      if (held !== undefined) this.#dropClient(held);
    };
    return { allowed, count, clientCount: held?.count ?? 0, release };
  }

  /**
   * Calls in flight to `key` for `client`: exact, in this process, or the `clientInflight`
   * counter's estimate; 0 without `perClient`.
   */
  clientCount(key: string, client: string): number {
    checkKey(key);
    if (typeof client !== 'string') throw invalidType('The "client" argument', 'of type string', client);
    const entry = clientEntry(key, client);
    const counter = this.#clientCounter;
    return counter !== undefined ? counter.get(entry) : (this.#clients.get(entry) ?? 0);
  }

  /**
   * Counts `client` in for `key` when the limit caps clients: its count including this call, and
   * whether that is over `perClient` (then nothing stays counted). `undefined` when not capped.
   */
  #holdClient(key: string, client: string | undefined): HeldClient | undefined {
    if (client === undefined) return undefined;
    if (typeof client !== 'string') throw invalidType('The "client" argument', 'of type string', client);
    if (this.perClient === Infinity) return undefined;
    const entry = clientEntry(key, client);
    const counter = this.#clientCounter;
    if (counter === undefined) {
      const count = (this.#clients.get(entry) ?? 0) + 1;
      if (count > this.perClient) return { entry, count, refused: true, guard: undefined };
      this.#clients.set(entry, count);
      return { entry, count, refused: false, guard: undefined };
    }
    const pairs = this.#clientPairs;
    let held: HeldClient;
    if (pairs !== undefined) {
      const count = syncResult('The "clientInflight" option\'s enter() result', pairs.enter(entry));
      held = { entry, count, refused: false, guard: undefined };
    } else {
      const [guard, count] = guardPair('The "clientInflight" option\'s incr() result', counter.incr(entry));
      held = { entry, count, refused: false, guard };
    }
    if (held.count > this.perClient) {
      held.refused = true;
      this.#dropClient(held);
    }
    return held;
  }

  /**
   * Lets go of the client `held` for a call whose upstream count failed (a key the counter
   * refuses, a closed counter), so that no failed call stays counted; returns `error` to rethrow.
   */
  #letGo(held: HeldClient | undefined, error: unknown): unknown {
    if (held !== undefined) this.#dropClient(held);
    return error;
  }

  /** Counts the client `held` out again. */
  #dropClient(held: HeldClient): void {
    if (held.guard !== undefined) return held.guard.release();
    if (this.#clientPairs !== undefined) return this.#clientPairs.leave(held.entry);
    const count = this.#clients.get(held.entry)! - 1;
    if (count === 0) this.#clients.delete(held.entry);
    else this.#clients.set(held.entry, count);
  }

  /** A slot refused for its client: the upstream was not counted, and releasing it does nothing. */
  #refuseClient(key: string, clientCount: number): UpstreamSlot {
    this.#refused++;
    return { allowed: false, count: this.inflight.get(key), clientCount, release: () => {} };
  }

  /** How many {@link acquire} and {@link enter} calls were allowed and refused since construction. */
  decisions(): { allowed: number; refused: number } {
    return { allowed: this.#allowed, refused: this.#refused };
  }

  /**
   * Stops counting: later {@link acquire} and {@link enter} calls throw `ERR_KEEPCOUNT_CLOSED`
   * (the HTTP adapters pass it to the framework's error handling). The `Inflight` the limit made
   * is closed, its counters freed at once (native memory on the native backend); slots still
   * held then release as no-ops. A counter it was given stays open, since it is the caller's and
   * perhaps shared with other limits or processes: slots held on it still give their calls back
   * when released, so closing never leaves a shared count high. `decisions()` still answers.
   * Idempotent; `using` calls it too.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#owned) (this.inflight as Inflight).close();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }
}

/** The `inflight` option: a new `Inflight` when absent, else anything with `incr` and `get`. */
function inflightOption(value: unknown): InflightCounter {
  return value === undefined ? new Inflight() : counterOption('inflight', value);
}

/** A counter option `name`: anything with `incr` and `get`. */
function counterOption(name: string, value: unknown): InflightCounter {
  const counter = value as Partial<InflightCounter> | null;
  if (
    typeof counter !== 'object' ||
    counter === null ||
    typeof counter.incr !== 'function' ||
    typeof counter.get !== 'function'
  ) {
    throw invalidType(`The "${name}" option`, 'an Inflight or an object with incr() and get() methods', value);
  }
  return counter as InflightCounter;
}

/**
 * What a counter's `incr()` returned, checked as a `[guard, count]` pair: a wrongly shaped result
 * (a user's counter answering `null` while its store is down, say) would otherwise fail only after
 * the call's client was counted in, and hold that client for good.
 */
function guardPair(what: string, result: unknown): [InflightGuard, number] {
  const pair = syncResult(what, result) as unknown[];
  if (
    !Array.isArray(pair) ||
    typeof (pair[0] as Partial<InflightGuard> | null)?.release !== 'function' ||
    typeof pair[1] !== 'number'
  ) {
    throw invalidType(what, 'a [guard, count] pair', result);
  }
  return pair as [InflightGuard, number];
}

/**
 * A client counted in for one call: its entry, its count including the call, whether that is
 * over `perClient`, and the guard to release when the `clientInflight` counter has no `leave`.
 */
interface HeldClient {
  entry: string;
  count: number;
  refused: boolean;
  guard: InflightGuard | undefined;
}

/** A counter that also counts in and out without guards, as `Inflight.enter` / `leave`. */
interface InflightPairs extends InflightCounter {
  enter(key: string): number;
  leave(key: string): void;
}

const hasPairs = (counter: InflightCounter): counter is InflightPairs =>
  typeof (counter as Partial<InflightPairs>).enter === 'function' &&
  typeof (counter as Partial<InflightPairs>).leave === 'function';

/**
 * Refuses an upstream key that is not a string. The counter would take a number as it takes a
 * string, but {@link clientEntry} could not tell upstream `1` calling for client `12.0.0.1` from
 * upstream `11` calling for `2.0.0.1`: one client refused for another's calls elsewhere.
 */
function checkKey(key: unknown): void {
  if (typeof key !== 'string') throw invalidType('The "key" argument', 'of type string', key);
}

/** The per-client map's key for `client` calling `upstream`: unambiguous whatever the two strings hold. */
const clientEntry = (upstream: string, client: string): string => `${upstream.length}:${upstream}${client}`;

const releaser =
  (guard: InflightGuard): (() => void) =>
  () =>
    guard.release();

/**
 * Runs `call` with a deadline: it gets a signal that aborts after `ms` (keepcount's
 * `timeoutSignal`, so `fetch` and `http.request` stop; shared with other callers of the same 10 ms
 * tick unless `options.signal` is given, see `timeoutSignal`), and the result rejects with a
 * `TimeoutError` (`ERR_KEEPCOUNT_TIMEOUT`) after `ms` even if `call` ignores the signal (keepcount's
 * `timeout`). Pass `options.signal` (e.g. aborted when the client goes away) to abort sooner.
 * Answer {@link isDeadlineError} failures with 504.
 *
 * @example
 * ```ts
 * try {
 *   const upstream = await withDeadline(2000, (signal) => fetch(url, { signal }));
 * } catch (error) {
 *   res.statusCode = isDeadlineError(error) ? 504 : 502;
 * }
 * ```
 */
export function withDeadline<T>(
  ms: number,
  call: (signal: AbortSignal) => PromiseLike<T>,
  options?: { signal?: AbortSignal },
): Promise<T> {
  let signal: AbortSignal;
  // Every bad argument rejects, none throws: a caller's `.catch` or `try { await }` sees them all.
  try {
    if (typeof call !== 'function') throw invalidType('The "call" argument', 'of type function', call);
    const caller: unknown = optionsObject(options).signal;
    signal = timeoutSignal(ms);
    if (caller !== undefined) {
      if (!(caller instanceof AbortSignal)) throw invalidType('The "signal" option', 'an AbortSignal', caller);
      signal = AbortSignal.any([signal, caller]);
    }
  } catch (error) {
    return Promise.reject(error as Error);
  }
  return timeout(
    Promise.resolve().then(() => call(signal)),
    ms,
  );
}

/**
 * True for what a missed deadline rejects with: keepcount's `TimeoutError`, or the `TimeoutError`
 * `DOMException` (or an error caused by one) that `fetch` and friends reject with when a
 * `timeoutSignal` aborts them.
 */
export function isDeadlineError(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e instanceof TimeoutError || e.name === 'TimeoutError') return true;
  }
  return false;
}
