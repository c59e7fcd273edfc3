/** Token-bucket quotas per key that hold across every node syncing them through Redis. */
import { invalidType, outOfRange } from '../errors.js';
import type { RequestLimiter } from '../http/quota.js';
import { storedKey } from '../long-key.js';
import { ALLOWED, limitSpec, type Decisions, type LimiterDecision, type RateLimit } from '../quotas.js';
import { integerOption, iterableArgument, optionsObject } from '../options.js';
import { Census, entryKeys, SyncedCells } from './cells.js';
import { syncOption } from './estimator.js';
import { failPolicyOption, type FailPolicy } from './fail-policy.js';
import type { LoanRequest } from './loan.js';
import { Room } from './room.js';
import type { RedisSync } from './sync.js';
import { leaseMsOption, nameOption } from './sync-options.js';

/**
 * Tokens on loan plus tokens in a key's Redis bucket never pass `burst + LOAN_PERIODS × rate ×
 * syncMs`. With every node asking each sync for what its demand needs, the bucket holds about one
 * period's refill (`rate × syncMs`) just before each loan and about as much is out on loan: the
 * second period of room keeps the cap from ever throwing refill away under full load (which would
 * admit less than the rate) while sync periods stretch to twice `syncMs`.
 */
const LOAN_PERIODS = 2;

/**
 * Most keys one limiter asks loans for in one sync: about ten Redis operations each, so a sync
 * stays within a few milliseconds of the server's time. Keys that need tokens now go first (see
 * {@link SyncedLimiter.loans}), then the others in turn (the least recently asked first); keys
 * past it wait for the next sync, their demand counting meanwhile.
 */
const MAX_LOANS = 1024;

/**
 * A key leaves (gives its tokens back and is forgotten) after this many syncs without a check.
 * Until then it keeps its loan and its place, so a key checked now and then (less often than every
 * sync) is admitted from its loan, not on credit again: credit is for keys new to the node.
 */
const IDLE_SYNCS = 10;

/**
 * Most keys one node keeps an account for: about 200 bytes each plus the key, which is at most
 * 257 code units (keys are kept in their bounded form, `storedKey`): 13 MB in all for short keys,
 * under 50 MB for the longest (a two-byte string of 257 units). Keys leave after
 * {@link IDLE_SYNCS} idle syncs, but not while Redis is away (nothing reaches it), so a flood of
 * new keys during an outage stops here. Past it a new key takes the place of one that owes
 * nothing (see {@link SyncedLimiter}'s `#account`), so a flood of distinct keys lets in new keys
 * as fast as syncs pay their debts (1,024 a sync), spread evenly over each sync period.
 */
const MAX_ACCOUNTS = 65_536;

/**
 * The layout of the presence entry, which holds no cells (only the node registry that tells each
 * node how many share a key's bucket): every node agrees on it.
 */
const PRESENCE_LAYOUT = 'presence';

/** Options of {@link SyncedLimiter}. */
export interface SyncedLimiterOptions {
  /** The {@link RedisSync} that carries it. Required. */
  sync: RedisSync;
  /** The limiter's name: nodes that give the same name share the buckets. Required; no `{` or `}`. */
  name: string;
  /**
   * Every key's bucket, fleet-wide: `{ perSecond, burst }` or `{ amount, periodMs, burst }`, as a
   * `Limiter`'s `RateLimit`; a check takes its `cost` in tokens. Required.
   */
  limit: RateLimit;
  /**
   * Keys with a bucket of their own size: `[key, RateLimit]` pairs, e.g. a `Map`. A key longer
   * than 256 UTF-16 code units is matched under its bounded form, as checks are (see the class
   * doc). Defaults to none.
   */
  keys?: Iterable<readonly [string, RateLimit]>;
  /**
   * How long a loan of tokens lasts without a successful sync: an integer in (`syncMs`,
   * 7,200,000]. A node drops what it holds when its loan runs out; Redis writes the loan off then,
   * so a crashed node's tokens come back to nobody and hold nothing up. Defaults to the sync's
   * `staleAfterMs`, when the fail policy takes over, but never less than `syncMs + timeoutMs`, so
   * that syncs on time always renew it.
   */
  leaseMs?: number;
  /** What to do while Redis is unreachable; see {@link FailPolicy}. Defaults to `'local'`. */
  failPolicy?: FailPolicy;
  /**
   * How long after its first sync a node waits before it lends itself credit (see the class doc):
   * an integer in [0, 3,600,000]. Defaults to the sync's `syncMs`, by when every node that started
   * with it has registered, so the nodes' credit together stays within one `burst`. With 0, credit
   * comes with the first sync, and nodes that start together may borrow up to `burst × (1 + 1/2 +
   * … + 1/N)` until their next sync: for a fleet whose nodes never start within a sync period of
   * each other.
   */
  creditAfterMs?: number;
}

/** A bucket's parameters as the script takes them. */
interface Bucket {
  /** Tokens per millisecond. */
  readonly rate: number;
  readonly burst: number;
  readonly cap: number;
  /** How long the Redis key lives after a sync: a lease, then the time to refill (0: for ever). */
  readonly ttlMs: number;
}

/** What this node knows of one key. */
interface Account {
  readonly key: string;
  readonly bucket: Bucket;
  /** Tokens this node holds: lent by Redis, less what it admitted (negative: borrowed on credit). */
  held: number;
  /** Cost checked (admitted or not) since the last loan request: the demand the share follows. */
  demand: number;
  /** Loan requests in a row with no demand: at {@link IDLE_SYNCS} the key leaves. */
  idle: number;
  /** Refused for want of tokens since the last loan request. */
  short: boolean;
  /** Checks of the key on this node, counted up to 2: a key checked once makes room first. */
  checks: number;
  /** `performance.now()` after which the loan is void (0: no loan). */
  expiresAt: number;
  /** See {@link LoanRequest.got}. */
  got: number;
  /** Tokens the key's bucket had left after the last loan, and `performance.now()` when the node heard. */
  spare: number;
  spareAt: number;
  /**
   * The `'local'` fail policy's own bucket: tokens and when they were counted, and the spell of
   * staleness it was started for (the limiter's `sync.freshAt` then, NaN before the first; see
   * {@link SyncedLimiter}'s `#stale`).
   */
  localTokens: number;
  localAt: number;
  localFrom: number;
}

/**
 * A token-bucket limiter whose per-key quotas hold for the whole fleet, Doorman-style: each node
 * holds a loan of tokens per active key from the key's bucket in Redis, checks against it locally
 * (no network on a check) and, every `syncMs`, in the sync's one script call, tells Redis what it
 * holds and asks for its last period's demand; Redis lends it that demand as far as the bucket's
 * tokens go, busy nodes splitting them by their traffic. A loan follows demand one sync behind, so
 * that alone would refuse a sudden burst below `burst` until the loans catch up: each reply also
 * says how many tokens the bucket had left, and a node may run ahead of its loan by its share of
 * them (`left / nodes`, refilled at the rate since), so a node alone admits a burst as its bucket
 * would. A key with no loan yet may take up to `burst / nodes` on credit, so its first requests
 * are not refused while a loan is on its way; not on an allowance (rate 0), which would never pay
 * back what a node started after another left owing takes again. Debts are paid from the next loans, and a node's
 * credit never passes `burst / nodes`. A node lends itself credit only from `creditAfterMs` (a sync
 * period) after its first sync, once its node count includes every node that started with it:
 * before, nodes started together counted 1, 2, …, N and borrowed up to `burst × (1 + 1/2 + … +
 * 1/N)` (measured: 270 admitted of a bucket of 100 that never refills, 8 nodes; now 100). A node
 * that has never synced admits nothing; await `sync.ready()` before serving. Pass it to
 * `tokenBucket` (or `tokenBucketHook`) as `limiter`. Keys are strings; one dimension: a check
 * takes its `cost` in tokens.
 *
 * # Long keys
 * Each node keeps an account per active key (up to 65,536) and names each key's bucket in Redis
 * after it, on every sync. With a `key` read from a request header the client picks its length, so
 * a key longer than 256 UTF-16 code units is kept, sent and counted in its bounded form (as
 * keepcount/http's heavy-hitter tables keep it; `talkerKey` there): its first 240 code units, `'…'`
 * and the first 16 hex digits of the SHA-256 of the whole key (`lib/long-key.ts`). Every node
 * derives the same form from the key alone, so a long key's requests on all nodes draw on one
 * bucket and the bound below holds for it. Two distinct long keys share a bucket only if their
 * 64-bit digests collide: for `n` distinct long keys, probability at most `n² / 2^65`.
 *
 * # The bound
 * Redis refills a key's bucket at `rate` up to `burst`, and never lets the tokens in the bucket
 * plus the tokens on loan pass `cap = burst + 2 × rate × syncMs`. Every admission spends a token a
 * node held or borrowed; a node's credit is at most `burst / nodes`. So over any window of `t` ms
 * the whole fleet admits at most what was in the bucket or on loan when it began, plus the refill
 * over it, plus the debts run up in it:
 *
 *     burst + rate × t + slack,  slack = burst + 2 × rate × syncMs
 *
 * whatever the node count (`n` nodes each borrowing `burst / n` add `burst`, with `n` as each last
 * saw it in Redis, which by `creditAfterMs` counts every node that started with it while the nodes
 * keep their sync period; but a node that starts may take `burst / nodes` a key again from a
 * bucket earlier nodes left owing, which the refill pays back, and a node killed in debt never
 * pays it, since a debt stays with its node id: up to `burst / nodes` a key per kill, README says
 * more), the round trips and
 * the clock offsets between nodes (the refill runs on Redis's clock). Waiting out a loan's lease on
 * the node's clock from before the request was sent, the node drops its tokens before Redis
 * writes them off. The fleet admits less than the rate when `burst < rate × syncMs` (the bucket
 * overflows between syncs), for keys past the 1,024 a sync carries, and for a node whose share is
 * below a request's cost. Staleness (`sync.staleness`; with `cluster: true`, this limiter's own
 * name's): a loan reflects the demand of the last sync period. Past `staleAfterMs` the
 * {@link FailPolicy} applies. `'local'` gives each node a bucket per key of `burst / nodes` refilled
 * at `rate / nodes`, which starts from what the node could still admit on a live loan (the loan
 * and the credit it may still take, within [0, `burst / nodes`]; empty for a key without one, so a
 * key first checked while stale waits for the refill). Under the default `leaseMs`
 * (`staleAfterMs`) every loan has lapsed by the first stale check, so every key starts empty; a
 * longer lease keeps loans into an outage. What it admits is owed as credit is, down to
 * `−burst / nodes`, paid back from its loans once a sync gets through. So the bound holds over
 * every window, across the cut and the return, when every node is cut off: its refill past what it
 * may owe is what Redis's refill of the same time would have lent. A node cut off while others
 * sync adds up to `rate / nodes` per millisecond it is stale in the window, since the others spend
 * Redis's refill. Measured (`__test__/redis-limiter-local.spec.ts`: 2 nodes, `burst` 1,000 at
 * 10/s, `syncMs` 50, `staleAfterMs` 400, cut off after spending their loans and credit): largest
 * excess over `rate × t` 1,502–1,525 against the bound's 2,001, where a stale node lent itself blind
 * credit before (1,995), and before that started a full bucket (2,506–2,519).
 */
export class SyncedLimiter implements RequestLimiter {
  /** Milliseconds a loan lasts without a successful sync. */
  readonly leaseMs: number;
  /** What a stale node does. */
  readonly failPolicy: FailPolicy;
  /** Milliseconds after its first sync from which this node lends itself credit. */
  readonly creditAfterMs: number;
  readonly #sync: RedisSync;
  readonly #base: string;
  readonly #bucket: Bucket;
  readonly #buckets = new Map<string, Bucket>();
  readonly #accounts = new Map<string, Account>();
  /**
   * Accounts of keys checked once whose loan came in and paid their credit, oldest loan first:
   * what a flood of distinct keys leaves behind, and where a new key finds room when the oldest
   * account owes (see {@link #account}).
   */
  readonly #room = new Room<Account>(performance.now());
  /** Registers the node in the limiter's registry, whose count is the limiter's {@link nodes}. */
  readonly #presence: SyncedCells;
  #closed = false;
  /** This node's checks allowed and refused, for {@link decisions}. */
  readonly #decisions: Decisions = { allowed: 0, refused: 0 };

  constructor(options: SyncedLimiterOptions) {
    const o = optionsObject(options);
    this.#sync = syncOption(o.sync);
    const name = nameOption('name', o.name);
    this.leaseMs = leaseMsOption(o.leaseMs, this.#sync);
    this.failPolicy = failPolicyOption(o.failPolicy);
    this.creditAfterMs = integerOption('creditAfterMs', o.creditAfterMs, 0, 3_600_000, this.#sync.syncMs);
    this.#bucket = this.#parse('The "limit" option', o.limit);
    if (o.keys !== undefined) {
      const pairs = iterableArgument('The "keys" option', 'an iterable of [key, RateLimit] pairs', o.keys);
      let i = 0;
      for (const entry of pairs) {
        if (!Array.isArray(entry) || typeof entry[0] !== 'string') {
          throw invalidType(`The "keys[${i}]" option`, 'a [string, RateLimit] pair', entry);
        }
        this.#buckets.set(storedKey(entry[0].toWellFormed()), this.#parse(`The "keys[${i}][1]" option`, entry[1]));
        i++;
      }
    }
    this.#base = `${this.#sync.prefix}:{${name}}`;
    // Under the limiter's lease, as its loans are: a process restarted under this node id then
    // takes the id's record over once the old one's lease runs out (without one, never).
    const leaseMs = this.leaseMs;
    const census = new Census(() => this.#sync.nodes);
    const keys = entryKeys(this.#base, 'p', PRESENCE_LAYOUT);
    this.#presence = new SyncedCells(0, keys, census, () => leaseMs, leaseMs);
    this.#sync.add(this, 'SyncedLimiter', name);
  }

  /**
   * Checks one request costing `cost` tokens (a safe integer >= 0; defaults to 1) for `key` and
   * takes them from this node's loan (or its credit) if it has them. Never waits on Redis. A
   * refusal's `retryAfterMs` is an estimate: the next sync, or the time the fleet's rate takes to
   * make the missing tokens, whichever is longer; `Infinity` when `cost` is above the burst or the
   * bucket never refills.
   */
  check(key: string, cost = 1): LimiterDecision {
    const decision = this.#decide(key, cost);
    if (decision.allowed) this.#decisions.allowed++;
    else this.#decisions.refused++;
    return decision;
  }

  /**
   * How many {@link check} calls this node allowed and refused since it was made (a check that
   * threw counts as neither; a closed limiter's refusals count): what keepcount/metrics exports as
   * `decisions_total` from each node.
   */
  decisions(): Decisions {
    return { ...this.#decisions };
  }

  /** {@link check}'s decision, uncounted. */
  #decide(key: string, cost: number): LimiterDecision {
    if (typeof key !== 'string') throw invalidType('The "key" argument', 'of type string', key);
    if (typeof cost !== 'number') throw invalidType('The "cost" argument', 'of type number', cost);
    if (!Number.isSafeInteger(cost) || cost < 0) throw outOfRange('The "cost" argument', 'a safe integer >= 0', cost);
    if (this.#closed) return refusal(Infinity);
    // Well formed first: Redis gets the key as UTF-8, where every lone surrogate is U+FFFD, so
    // keys that differ only there share one bucket in Redis and must share one account here too.
    const account = this.#account(storedKey(key.isWellFormed() ? key : key.toWellFormed()));
    if (account === undefined) return refusal(this.#sync.syncMs);
    const { bucket } = account;
    account.demand += cost;
    if (account.checks < 2) account.checks++;
    if (cost > bucket.burst) return refusal(Infinity);
    const now = performance.now();
    if (this.#sync.staleFor(this)) return this.#stale(account, cost, now);
    // A loan past its lease is void (Redis writes it off); a debt is not. A key with no loan yet
    // may borrow its node's share of the burst; a key with a loan, its node's share of what the
    // bucket had left after it, refilled since: so a sudden burst is admitted as far as the bucket
    // goes, rather than only as far as the last period's demand was lent. Either only once the
    // node count includes every node that started with this one (`creditAfterMs` after the first
    // sync): before, it takes none.
    const credit = this.#credit(account, now);
    if (account.held - cost >= -credit) {
      account.held -= cost;
      return ALLOWED;
    }
    account.short = true;
    // An allowance refills never, but a key with no loan yet may get one at the next sync.
    if (bucket.rate === 0) return refusal(now > account.expiresAt ? this.#sync.syncMs : Infinity);
    return refusal(Math.max(this.#sync.syncMs, (cost - account.held - credit) / bucket.rate));
  }

  /**
   * The credit `account` may run into at `now` (how far below zero its `held` may go), its loan
   * dropped first if its lease ran out: its node's share of what the bucket had left after the last
   * loan, refilled since, or with no loan its share of the burst; none before {@link ready}.
   */
  #credit(account: Account, now: number): number {
    const { bucket } = account;
    const expired = now > account.expiresAt;
    if (expired) account.held = Math.min(0, account.held);
    if (!this.ready()) return 0;
    if (!expired) return Math.min(bucket.burst, account.spare + bucket.rate * (now - account.spareAt)) / this.nodes;
    // A key with no loan borrows blind, whatever its bucket holds: a node started after another
    // left owing takes that credit again, which a refill pays back, but an allowance (rate 0)
    // never would, so an allowance lends none (8 restarts took 100 tokens each from a spent one).
    return bucket.rate > 0 ? bucket.burst / this.nodes : 0;
  }

  /**
   * Live nodes syncing this limiter (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`).
   */
  get nodes(): number {
    return this.#presence.census.nodes;
  }

  /** @internal The presence entry, for the node count. */
  entries(): SyncedCells[] {
    return [this.#presence];
  }

  /**
   * @internal Whether this node lends itself credit: once its node count includes every node that
   * started with it (see {@link check}), or once closed (it takes no more checks).
   */
  ready(): boolean {
    return this.#closed || this.#presence.census.countedAfter(this.creditAfterMs);
  }

  /**
   * @internal One loan request per known key, up to {@link MAX_LOANS}. A key idle for
   * {@link IDLE_SYNCS} syncs gives its tokens back and is forgotten.
   *
   * Keys that need tokens now go first: checked since their last request and either refused for
   * want of tokens, past half their credit, or holding a loan (a client in steady use, whose loan
   * would lapse unrenewed). The others follow in turn. A flood of distinct keys, each checked once
   * and within its credit, then waits behind them rather than delaying them: before, a quiet
   * client arriving during such a flood waited for every flooding key's turn, 1,024 a sync, and
   * was refused once its credit ran out. Finding them reads every account once a sync: with the
   * 65,536 accounts a node keeps at most, a sync's loan requests took 2.2–3.1 ms against
   * 1.2–2.2 ms when only the first 1,024 were read (28 Nov 2026): off the request path, about 1 %
   * of a core more at the default `syncMs` of 100, and only while that many keys are active.
   */
  loans(): LoanRequest[] {
    if (this.#closed) {
      // Every key leaves, MAX_LOANS a sync, each account kept until Redis applied its leave (see
      // #request): a leave whose sync failed goes again with the next, the others wait their turn
      // ({@link pending}). Before, all were dropped with the first sync after close(), so if it
      // failed, what the node admitted on credit never reached Redis and its tokens were written
      // off only at the lease, and sync.close() said true; then all went in one call, which with
      // 65,536 keys held Redis for 2.1 s (the other nodes' syncs timed out) and with ioredis past
      // about 13,000 threw before it was sent, every sync after it too.
      this.#room.clear();
      if (this.#accounts.size === 0) this.#sync.remove(this);
      const leaves: LoanRequest[] = [];
      for (const account of this.#accounts.values()) {
        if (leaves.length === MAX_LOANS) break;
        leaves.push(this.#request(account, true));
      }
      return leaves;
    }
    const now = performance.now();
    this.#room.startPeriod(now);
    const urgent: Account[] = [];
    const others: Account[] = [];
    for (const account of this.#accounts.values()) {
      if (urgent.length === MAX_LOANS) break;
      if (this.#needsTokens(account, now)) urgent.push(account);
      else if (others.length < MAX_LOANS - urgent.length) others.push(account);
    }
    const taken = urgent.concat(others.slice(0, MAX_LOANS - urgent.length));
    return taken.map((account) => {
      const request = this.#request(account);
      // The keys asked for go to the back of the line; a key that leaves is forgotten.
      this.#accounts.delete(account.key);
      if (request.want >= 0) this.#accounts.set(account.key, account);
      else this.#room.withdraw(account);
      return request;
    });
  }

  /**
   * Gives back every key's tokens, and pays what each owes, at the next syncs that succeed,
   * {@link MAX_LOANS} keys a sync so that no call holds Redis long (`sync.close()` syncs until all
   * went back: see {@link RedisSync.close}), so the other nodes get the quota back, then stops
   * syncing. Later checks refuse.
   */
  close(): void {
    this.#closed = true;
  }

  /**
   * @internal The syncs this closed limiter still needs to give every key back ({@link loans}
   * sends {@link MAX_LOANS} leaves a sync); 0 while open.
   */
  pending(): number {
    return this.#closed ? Math.ceil(this.#accounts.size / MAX_LOANS) : 0;
  }

  /** Whether {@link close} ran: checks refuse then. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Whether `account` needs tokens now, so that its loan request goes first (see {@link loans}). */
  #needsTokens(account: Account, now: number): boolean {
    if (account.demand === 0) return false;
    return account.short || now <= account.expiresAt || account.held <= -account.bucket.burst / (2 * this.nodes);
  }

  /** The loan request for `account`; a key with no demand and no debt (or `leave`) leaves. */
  #request(account: Account, leave = false): LoanRequest {
    const { bucket } = account;
    const now = performance.now();
    if (now > account.expiresAt) account.held = Math.min(0, account.held);
    const held = account.held;
    const { demand, idle, short } = account;
    account.idle = demand === 0 ? idle + 1 : 0;
    account.short = false;
    const leaving = leave || (account.idle >= IDLE_SYNCS && held >= 0);
    const want = leaving ? -1 : Math.max(0, demand - held);
    account.demand = 0;
    return {
      key: `${this.#base}:b:${account.key}`,
      rate: bucket.rate,
      burst: bucket.burst,
      cap: bucket.cap,
      leaseMs: this.leaseMs,
      ttlMs: bucket.ttlMs,
      held,
      want,
      got: account.got,
      lent: (tokens, left, sentAt, seq) => {
        // A closed limiter's leave, applied (−1: by an earlier run of the same script), or found
        // applied by the one before whose reply was lost (script.ts): the account is done.
        if (leave) {
          this.#accounts.delete(account.key);
          return;
        }
        // Not applied (see LoanRequest.lent): `got` stays, so the next sync's request names the
        // loan this node last took in, and Redis returns the one it made since.
        if (leaving || tokens < 0) return;
        // A reply later than the lease (counted from before the request left) is void: Redis may
        // already have written the loan off, or else gives it back at the next sync.
        if (performance.now() > sentAt + this.leaseMs) return;
        account.held += tokens;
        account.expiresAt = sentAt + this.leaseMs;
        account.got = seq;
        // Heard now, later than Redis counted it: the refill credited from here on is never early.
        account.spare = left;
        account.spareAt = performance.now();
        // Paid up, it may make room for a new key (unless checked again or made room for already).
        if (this.#mayMakeRoom(account)) this.#room.offer(account);
      },
      // A failed sync tells Redis nothing: the demand counts in the next one, and idle syncs are
      // counted only when they reach Redis. A key that left is gone (its loan lapses in Redis).
      failed: () => {
        account.demand += demand;
        account.idle = idle;
        account.short ||= short;
      },
    };
  }

  /**
   * The key's account, made on its first check. With {@link MAX_ACCOUNTS} held, the least recently
   * synced one makes room if it owes nothing (its tokens lapse in Redis). If it owes, forgetting
   * its debt would admit it twice, so a key checked once whose loan paid its credit makes room
   * instead, the one paid longest ago, as far as {@link Room} hands out room at this point of the
   * sync period. Under a flood of distinct keys the oldest accounts are flooding keys still on
   * credit (a sync pays 1,024 debts, the oldest first): before, a new key was refused until the
   * syncs had come round to every one of them, 64 syncs later. A key checked more than once, a
   * client in use, is never made room from here. With no room, the new key is refused
   * (`undefined`) until debts are paid or keys leave.
   */
  #account(key: string): Account | undefined {
    let account = this.#accounts.get(key);
    if (account === undefined) {
      if (this.#accounts.size >= MAX_ACCOUNTS) {
        const oldest = this.#accounts.values().next().value as Account;
        if (oldest.held >= 0) {
          this.#accounts.delete(oldest.key);
          this.#room.withdraw(oldest);
        } else {
          const paid = this.#room.take(performance.now(), (a) => this.#mayMakeRoom(a));
          if (paid === undefined) return undefined;
          this.#accounts.delete(paid.key);
        }
      }
      const bucket = this.#buckets.get(key) ?? this.#bucket;
      account = {
        key,
        bucket,
        held: 0,
        demand: 0,
        idle: 0,
        short: false,
        checks: 0,
        expiresAt: 0,
        got: this.#sync.sequence,
        spare: 0,
        spareAt: 0,
        localTokens: 0,
        localAt: 0,
        localFrom: NaN,
      };
      this.#accounts.set(key, account);
    }
    return account;
  }

  /**
   * Whether `account` may make room for a new key: still its key's account, checked once, and
   * owing nothing (forgetting a debt would admit the key twice).
   */
  #mayMakeRoom(account: Account): boolean {
    return account.checks === 1 && account.held >= 0 && this.#accounts.get(account.key) === account;
  }

  /**
   * A check while the sync is stale, by the fail policy. `'local'` on a sync that never reached
   * Redis refuses: its node count is only itself, so every node started while Redis was away
   * would admit a whole burst per key (N nodes, N bursts), where a node that never synced admits
   * nothing.
   *
   * `'local'` goes on from where the node stood: at the spell's first check of the key (a spell
   * is named by `sync.freshAt`, see below) its bucket holds what the node could still
   * have admitted from a live loan, `held` plus {@link #credit} within [0, `burst / nodes`], and
   * it refills at `rate / nodes` from then. A key with no live loan (its lease ran out, or first
   * checked while stale) starts empty: blind credit (`burst / nodes`, whatever the bucket holds)
   * is not lent while stale, since a node cut off long enough leaves the others' node count and
   * they lend themselves `burst` over fewer nodes (the audit: 2 nodes, `burst` 10 refilled once an
   * hour, the bucket spent by B; A, cut off, borrowed 5 blind, then B, counting 1 node, 10: 25
   * admitted against the bound's 20.001).
   * What it admits is owed, as credit is (`held` goes down, never below
   * `−burst / nodes`), and the node reports it when a sync gets through, so its loans pay it back;
   * past that floor its refill is not owed, which Redis's refill of the same time makes up for when
   * every node is cut off (see the class doc). Before, the bucket started full whatever the node
   * had spent or owed, and nothing it admitted was owed: two nodes that spent their loans and
   * credit just before Redis went away admitted another `burst` between them once stale (the
   * audit: 2,432–2,586 admitted against a bound of about 2,014).
   */
  #stale(account: Account, cost: number, now: number): LimiterDecision {
    if (this.failPolicy === 'open') return ALLOWED;
    if (this.failPolicy === 'closed' || !this.#sync.synced) return refusal(this.#sync.syncMs);
    const nodes = this.nodes;
    const { rate, burst } = account.bucket;
    const share = burst / nodes;
    // The spell runs from the first stale check until a sync makes the limiter fresh again, as
    // `freshAt` changes only then. Before, it was named by the `sentAt` of the limiter's last
    // count, which a sync's reply sets a few microtasks before the sync makes it fresh: a check in
    // between opened a spell named after that sync, which the next real spell then took for its
    // own and went on from that bucket, whatever the node spent in between (the audit: 2,997
    // admitted where the bound was 2,000); and a limiter never counted (made while Redis was away
    // on a sync that had synced) had NaN, unequal to itself, so each check started its bucket
    // again and its refill never built up.
    const spell = this.#sync.freshAt(this);
    if (account.localFrom === spell) {
      const elapsed = Math.max(0, now - account.localAt);
      account.localTokens = Math.min(share, account.localTokens + (elapsed * rate) / nodes);
      if (now > account.expiresAt) account.held = Math.min(0, account.held);
    } else {
      // Live credit only: a key with no live loan would borrow blind, and a node cut off long
      // enough drops out of the others' count, so they lend themselves a larger share of the
      // same burst (see the method doc).
      const live = now <= account.expiresAt;
      const credit = live ? this.#credit(account, now) : 0;
      if (!live) account.held = Math.min(0, account.held);
      account.localTokens = Math.min(share, Math.max(0, account.held + credit));
      account.localFrom = spell;
    }
    account.localAt = now;
    if (account.localTokens >= cost) {
      account.localTokens -= cost;
      // Owed as far as the node's credit goes; past it, what the refill lets in is not, which
      // Redis's own refill over the same time covers when every node is cut off (see the class doc).
      account.held = Math.min(account.held, Math.max(account.held - cost, -share));
      return ALLOWED;
    }
    if (rate === 0) return refusal(Infinity);
    return refusal(((cost - account.localTokens) * nodes) / rate);
  }

  #parse(what: string, limit: unknown): Bucket {
    const spec = limitSpec(
      what,
      limit,
      "(a SyncedLimiter has one dimension: { perSecond, burst } or { amount, periodMs, burst }, not a Limiter's " +
        '{ requests: …, units: … })',
    );
    const rate = (spec.amount * 1e6) / spec.periodNs;
    const cap = spec.burst + LOAN_PERIODS * rate * this.#sync.syncMs;
    const ttlMs = rate === 0 ? 0 : Math.ceil(this.leaseMs + spec.burst / rate);
    return { rate, burst: spec.burst, cap, ttlMs };
  }
}

function refusal(retryAfterMs: number): LimiterDecision {
  return { allowed: false, retryAfterMs };
}
