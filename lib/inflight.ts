/** Counts of things in progress per key, released by guards. */
import { closedInflight, dispose } from './closed.js';
import { active } from './backend.js';
import type { InflightCore, Key, OwnedInflightCore } from './core.js';
import { withCode } from './errors.js';
import { ownKey, validateKey } from './keys.js';
import { countArgument, integerOption, optionsObject, seedOption, shapeOptions } from './options.js';
import {
  inSharedDir,
  sharedBackend,
  sharedDir,
  sharedMode,
  sharedName,
  sharedSeed,
  type SharedCreation,
  type SharedPlacement,
} from './shared.js';

/** Options of {@link Inflight}. */
export interface InflightOptions {
  /** Rows of the sketch; see `EstimatorOptions.hashes`. Defaults to 4. */
  hashes?: number;
  /** Counters per row; see `EstimatorOptions.slots`. Defaults to 8192 (pingora-limits' `Inflight`). */
  slots?: number;
  /** The hash seed; see `EstimatorOptions.seed`. Defaults to a random seed. */
  seed?: bigint | number;
}

/**
 * An in-flight counter's counters as its guards reach them: one box per counter, shared with every
 * guard it hands out, so that closing the counter reaches the guards too. A guard released after
 * the close gives nothing back (the close took back everything) and cannot throw, which the
 * garbage-collection safety net relies on.
 */
export interface InflightCounts {
  core: InflightCore;
  /** False once the counter closed (and `core` is a stand-in that throws `ERR_KEEPCOUNT_CLOSED`). */
  open: boolean;
}

/**
 * Holds what a guard added, for the explicit release and the garbage-collection safety net: the
 * guard's value and how many times it was added, not their product, which passes 2^53 (where a
 * double stops counting exactly and a backend refuses it as a `value`) long before the count does.
 */
interface Ticket {
  readonly counts: InflightCounts;
  readonly key: Key;
  readonly value: number;
  times: number;
}

/**
 * Gives back `times × value` in steps that are each a safe integer, so a release can never be
 * refused as out of range and takes back exactly what was added (on the native backend's i64
 * counters, and on the fallback's doubles wherever the sums are exact).
 */
const settle = (ticket: Ticket): void => {
  const { counts, key, value } = ticket;
  const core = counts.core;
  let left = ticket.times;
  ticket.times = 0;
  if (value === 0 || !counts.open) return;
  const perStep = Math.floor(Number.MAX_SAFE_INTEGER / Math.abs(value));
  while (left > 0) {
    const n = Math.min(left, perStep);
    core.incr(key, -n * value);
    left -= n;
  }
};

/**
 * Safety net: a guard collected without `release()` gives its count back then. `settle` cannot
 * throw for a validated ticket; it must not, as an exception here would end the process.
 */
const unreleased = new FinalizationRegistry<Ticket>(settle);

/**
 * What {@link Inflight.incr} returns with the count: it gives back everything it added when
 * released, explicitly, by `using`, or, as a safety net, some time after it is garbage-collected.
 */
export interface InflightGuard extends Disposable {
  /** The key's current estimated count. */
  get(): number;
  /** Adds the guard's value again (it will be released too); returns the new estimate. */
  incr(): number;
  /** Gives back everything this guard added. Idempotent. */
  release(): void;
  /** True once released. */
  readonly released: boolean;
}

/**
 * What counts calls in flight for `UpstreamLimit`: an {@link Inflight}, or keepcount/redis'
 * `SyncedInflight`, which counts them across machines.
 */
export interface InflightCounter {
  /** Adds `value` (defaults to 1) to `key`; returns the guard that gives it back and the new count. */
  incr(key: Key, value?: number): [guard: InflightGuard, count: number];
  /** `key`'s current count. */
  get(key: Key): number;
}

/**
 * `Inflight.incr` on any counters: validates, adds `value` to `key` in `counts` and returns the
 * guard that gives it back (released by the garbage collector if never released), for
 * keepcount/redis' `SyncedInflight` too.
 */
export function guardedIncr(counts: InflightCounts, key: Key, value = 1): [guard: InflightGuard, count: number] {
  const k = validateKey(key);
  const v = countArgument('value', value);
  const ticket: Ticket = { counts, key: ownKey(k), value: v, times: 1 };
  const count = counts.core.incr(ticket.key, v);
  return [new Guard(ticket, v), count];
}

class Guard implements InflightGuard {
  readonly #ticket: Ticket;
  readonly #value: number;
  #released = false;

  constructor(ticket: Ticket, value: number) {
    this.#ticket = ticket;
    this.#value = value;
    unreleased.register(this, ticket, this);
  }

  get released(): boolean {
    return this.#released;
  }

  get(): number {
    return this.#ticket.counts.core.get(this.#ticket.key);
  }

  incr(): number {
    if (this.#released) {
      throw withCode(new Error('Cannot incr() a released Inflight guard'), 'ERR_KEEPCOUNT_RELEASED');
    }
    const count = this.#ticket.counts.core.incr(this.#ticket.key, this.#value);
    this.#ticket.times++;
    return count;
  }

  release(): void {
    if (this.#released) return;
    this.#released = true;
    unreleased.unregister(this);
    settle(this.#ticket);
  }

  [dispose](): void {
    this.release();
  }
}

/** Options of {@link Inflight.openShared}. */
export interface SharedInflightOptions extends SharedCreation {
  /** As {@link InflightOptions.hashes}; every process must pass the same. Defaults to 4. */
  hashes?: number;
  /** As {@link InflightOptions.slots}; every process must pass the same. Defaults to 8192. */
  slots?: number;
  /** As {@link InflightOptions.seed}, but required: every process must pass the same seed. */
  seed: bigint | number;
  /**
   * How many processes can hold the segment at once, fixed when it is created: each has a slot
   * with its own copy of the sketch, so the file holds `processes + 1` copies, `(processes + 1) ×
   * hashes × slots × 8` bytes, which the creator allocates whole on Linux: 17 MB at the defaults
   * (a Docker container's `/dev/shm` is 64 MiB). An integer in [1, 1024]. Defaults to 64.
   */
  processes?: number;
}

/** Default process slots of a shared in-flight segment. */
const DEFAULT_PROCESSES = 64;
/** Most process slots (`crates/limits/src/shared/inflight.rs` `MAX_PROCESSES`). */
const MAX_PROCESSES = 1024;

/** A shared core for the constructor to adopt; only {@link Inflight.openShared} makes one. */
class Adopted {
  constructor(readonly core: OwnedInflightCore) {}
}

/**
 * Estimates how many of something are in progress per key (pingora-limits' `Inflight`): `incr`
 * counts one in and returns a guard whose release counts it out.
 *
 * A guard that is garbage-collected unreleased is released by a `FinalizationRegistry`, so a
 * forgotten guard cannot hold its count forever; but collection happens at the engine's
 * discretion, possibly never in a short-lived process, so release guards explicitly (or with
 * `using`) and treat the safety net as leak protection only.
 *
 * @example
 * ```ts
 * const inflight = new Inflight();
 * const [guard, count] = inflight.incr(clientIp);
 * try { if (count <= 10) await handle(); } finally { guard.release(); }
 * ```
 */
export class Inflight implements InflightCounter, Disposable {
  /** Its counters, as its guards reach them: the core here closes. */
  readonly #counts: InflightCounts & { core: OwnedInflightCore };

  constructor(options?: InflightOptions);
  /** @internal {@link Inflight.openShared}'s way in. */
  constructor(adopted: Adopted);
  constructor(options?: InflightOptions | Adopted) {
    if (options instanceof Adopted) {
      this.#counts = { core: options.core, open: true };
      return;
    }
    const o = optionsObject(options);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 8192 });
    this.#counts = { core: new active.Estimator(hashes, slots, seedOption(o.seed)), open: true };
  }

  /**
   * Adds `value` (a safe integer; defaults to 1) to `key`. Returns `[guard, count]`: the guard that
   * gives it back and the key's new estimated count (a tuple, as pingora's `(Guard, isize)`).
   */
  incr(key: Key, value = 1): [guard: InflightGuard, count: number] {
    return guardedIncr(this.#counts, key, value);
  }

  /**
   * In-flight counts `name`, shared by every process of this host that opens it, so a cap such as
   * "20 calls to this upstream" holds for all of them together. Each process's increments are
   * also kept in a slot of its own in the segment; when a process dies holding guards (even by
   * `SIGKILL`), the others take its counts back within 100 ms (each checks on an unref'd timer),
   * on Linux whatever PID namespace (container) either runs in.
   * The segment, its errors and its lifetime are as for `Estimator.openShared`; it also throws
   * `ERR_KEEPCOUNT_FULL` when all `processes` slots are held by live processes. The object holds
   * its slot until {@link close} (or `using`), its garbage collection or the process's exit, each
   * of which takes back what it still counts.
   *
   * @example
   * ```ts
   * const upstream = Inflight.openShared('upstream-calls', { seed: BigInt(process.env.KEEPCOUNT_SEED!) });
   * const [guard, count] = upstream.incr('payments-api');
   * try { if (count <= 20) await callUpstream(); } finally { guard.release(); }
   * ```
   */
  static openShared(name: string, options: SharedInflightOptions): Inflight {
    const n = sharedName(name);
    const o = optionsObject<SharedInflightOptions>(options);
    const { hashes, slots } = shapeOptions(o.hashes, o.slots, { hashes: 4, slots: 8192 });
    const seed = sharedSeed(o.seed);
    const processes = integerOption('processes', o.processes, 1, MAX_PROCESSES, DEFAULT_PROCESSES);
    const dir = sharedDir(o);
    const mode = sharedMode(o);
    const shared = sharedBackend('Inflight.openShared');
    const core = inSharedDir(dir, n, () => shared.openInflight(n, hashes, slots, seed, processes, dir, mode));
    return new Inflight(new Adopted(core));
  }

  /**
   * Removes the shared segment `name`; see `Estimator.unlink`. Processes that hold it keep
   * counting in the removed file until they close it; the next `openShared` starts afresh.
   */
  static unlink(name: string, options?: SharedPlacement): void {
    const n = sharedName(name);
    const dir = sharedDir(optionsObject(options));
    const shared = sharedBackend('Inflight.unlink');
    inSharedDir(dir, n, () => shared.unlink(n, dir));
  }

  /**
   * Adds `value` (a safe integer; defaults to 1) to `key` without a guard and returns the key's new
   * estimated count: the fast path for callers that always pair it with {@link leave}, e.g. in a
   * `finally`. No object is allocated and no safety net is registered, so an `enter` never left
   * holds its count forever, and a `leave` without its `enter` counts the key low.
   *
   * @example
   * ```ts
   * if (inflight.enter(upstream) > max) { inflight.leave(upstream); return refuse(); }
   * try { await call(upstream); } finally { inflight.leave(upstream); }
   * ```
   */
  enter(key: Key, value = 1): number {
    const k = validateKey(key);
    const v = countArgument('value', value);
    return this.#counts.core.incr(k, v);
  }

  /**
   * Takes back what {@link enter} added: `value` (a safe integer; defaults to 1) from `key`. After
   * {@link close} it does nothing, as a guard's release: the close took back everything, and a
   * `finally` (or `UpstreamLimit`'s slot, released when a request ends) that outlives it must not
   * throw.
   */
  leave(key: Key, value = 1): void {
    const k = validateKey(key);
    const v = countArgument('value', value);
    const counts = this.#counts;
    if (counts.open) counts.core.incr(k, -v);
  }

  /** `key`'s current estimated count. */
  get(key: Key): number {
    const k = validateKey(key);
    return this.#counts.core.get(k);
  }

  /**
   * Frees the counters now, rather than when the garbage collector gets to this object. On a
   * shared `Inflight` ({@link openShared}) it also takes back from the host's counts everything
   * this object still holds (guards not released, `enter`s not left) and frees its process slot
   * for another process or thread. Guards handed out before are settled by it: releasing one
   * later (or calling {@link leave}) gives nothing back and does not throw, while a guard's `get()`
   * and `incr()` throw `ERR_KEEPCOUNT_CLOSED`, as every other later call of this object does.
   * Idempotent; `using` calls it too.
   */
  close(): void {
    const counts = this.#counts;
    if (!counts.open) return;
    const core = counts.core;
    counts.open = false;
    counts.core = closedInflight();
    core.close();
  }

  /** {@link close}, for `using`. */
  [dispose](): void {
    this.close();
  }
}
