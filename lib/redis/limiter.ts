/** Token-bucket quotas per key that hold across every node syncing them through Redis. */
import { invalidType, outOfRange } from '../errors.js';
import type { RequestLimiter } from '../http/quota.js';
import { storedKey } from '../long-key.js';
import { ALLOWED, type Decisions, type LimiterDecision } from '../quotas.js';
import type { Account } from './account.js';
import { Census, entryKeys, SyncedCells } from './cells.js';
import type { FailPolicy } from './fail-policy.js';
import { Ledger } from './ledger.js';
import { limiterConfig, type SyncedLimiterOptions } from './limiter-options.js';
import type { LoanRequest } from './loan.js';
import { LocalBucket } from './local-bucket.js';
import type { RedisSync } from './sync.js';

export type { SyncedLimiterOptions } from './limiter-options.js';

/**
 * The layout of the presence entry, which holds no cells (only the node registry that tells each
 * node how many share a key's bucket): every node agrees on it.
 */
const PRESENCE_LAYOUT = 'presence';

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
 * 1/N)` (measured: 270 admitted of a bucket of 100 that never refills, 8 nodes; now 100). It waits
 * as long again after a sync that may have followed a loss of its registry entries (a new
 * incarnation, or a lower count: {@link Census.count}), after which the nodes register again one
 * at a time as at a start (measured: the same 8 nodes after a restart to an empty Redis lent
 * themselves 270 at once; now 97–99 admitted). A node that has never synced admits nothing;
 * await `sync.ready()` before serving. Pass it to `tokenBucket` (or `tokenBucketHook`) as
 * `limiter`. Keys are strings; one dimension: a check takes its `cost` in tokens.
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
 * whatever the node count (`n` nodes each borrowing `burst / n` add `burst`, with `n` the most each
 * counted in Redis lately (see `'local'` below), which by `creditAfterMs` counts every node that
 * started with it while the nodes keep their sync period; but a node that starts may take
 * `burst / nodes` a key again from a bucket earlier nodes left owing, which the refill pays back,
 * and a node killed in debt never pays it, since a debt stays with its node id: up to
 * `burst / nodes` a key per kill, README says more), the round trips and the clock offsets between
 * nodes (the refill runs on Redis's clock). Waiting out a loan's lease on
 * the node's clock from before the request was sent, the node drops its tokens before Redis
 * writes them off. The fleet admits less than the rate when `burst < rate × syncMs` (the bucket
 * overflows between syncs), for keys past the 1,024 a sync carries, and for a node whose share is
 * below a request's cost. Staleness (`sync.staleness`; with `cluster: true`, this limiter's own
 * name's): a loan reflects the demand of the last sync period. Past `staleAfterMs` the
 * {@link FailPolicy} applies. `'local'` gives each node a bucket per key of `burst / nodes` refilled
 * at `rate / nodes`, which starts from what the node could still admit on a live loan (the loan
 * and the credit it may still take, within [0, `burst / nodes`]; empty for a key without one, so a
 * key first checked while stale waits for the refill). Here, as for credit, `nodes` is the most
 * the registry counted lately, a higher count held for its lifetime in the node's syncs (10) after
 * it and after the last count that may have followed a loss ({@link Census.shareNodes}).
 * After Redis lost the registry the nodes count 1, 2, …, N in turn: with Redis gone again before
 * their next syncs, 4 nodes had buckets of `burst / 1` to `burst / 4` (208 admitted of a `burst`
 * of 100; now 100). Under the default `leaseMs`
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
  /** Every key's account, and the loan requests that settle them. */
  readonly #ledger: Ledger;
  /** Registers the node in the limiter's registry, whose count is the limiter's {@link nodes}. */
  readonly #presence: SyncedCells;
  #closed = false;
  /** This node's checks allowed and refused, for {@link decisions}. */
  readonly #decisions: Decisions = { allowed: 0, refused: 0 };

  constructor(options: SyncedLimiterOptions) {
    const config = limiterConfig(options);
    this.#sync = config.sync;
    this.leaseMs = config.leaseMs;
    this.failPolicy = config.failPolicy;
    this.creditAfterMs = config.creditAfterMs;
    this.#ledger = new Ledger(config);
    // Under the limiter's lease, as its loans are: a process restarted under this node id then
    // takes the id's record over once the old one's lease runs out (without one, never).
    const leaseMs = this.leaseMs;
    const census = new Census(this.#sync);
    const keys = entryKeys(config.base, 'p', PRESENCE_LAYOUT);
    this.#presence = new SyncedCells(0, keys, census, () => leaseMs, leaseMs);
    this.#sync.add(this, 'SyncedLimiter', config.name);
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
    const account = this.#ledger.account(storedKey(key.isWellFormed() ? key : key.toWellFormed()));
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
    // sync, or after a count that may have followed a loss of the registry): before, it takes none.
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
    const nodes = this.#shareNodes;
    if (!expired) return Math.min(bucket.burst, account.spare + bucket.rate * (now - account.spareAt)) / nodes;
    // A key with no loan borrows blind, whatever its bucket holds: a node started after another
    // left owing takes that credit again, which a refill pays back, but an allowance (rate 0)
    // never would, so an allowance lends none (8 restarts took 100 tokens each from a spent one).
    return bucket.rate > 0 ? bucket.burst / nodes : 0;
  }

  /**
   * Live nodes syncing this limiter (this one included), as Redis counted them at its last sync;
   * before its first, the most any structure on its sync has counted (`sync.nodes`). Its credit
   * and `'local'` bucket divide by the most it counted lately instead (see `Census.shareNodes`).
   */
  get nodes(): number {
    return this.#presence.census.nodes;
  }

  /**
   * The node count a share divides by: the most Redis counted lately, not the last count alone,
   * which drops while the nodes register again one at a time after Redis lost the registry (see
   * `Census.shareNodes`).
   */
  get #shareNodes(): number {
    return this.#presence.census.shareNodes;
  }

  /** @internal The presence entry, for the node count. */
  entries(): SyncedCells[] {
    return [this.#presence];
  }

  /**
   * @internal Whether this node lends itself credit: once its node count includes every node that
   * started with it, or registered again after Redis lost them (see {@link check}), or once closed
   * (it takes no more checks).
   */
  ready(): boolean {
    return this.#closed || this.#presence.census.countedAfter(this.creditAfterMs);
  }

  /**
   * @internal One loan request per known key, up to the ledger's `MAX_LOANS`. A key idle for its
   * `IDLE_SYNCS` syncs gives its tokens back and is forgotten (see {@link Ledger}).
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
      // Every key leaves (see Ledger.leaves); the limiter stops syncing once all have.
      if (this.#ledger.size === 0) this.#sync.remove(this);
      return this.#ledger.leaves();
    }
    return this.#ledger.requests(this.#shareNodes);
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
   * sends the ledger's `MAX_LOANS` leaves a sync); 0 while open.
   */
  pending(): number {
    return this.#closed ? this.#ledger.syncsToLeave() : 0;
  }

  /** Whether {@link close} ran: checks refuse then. */
  get closed(): boolean {
    return this.#closed;
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
    const nodes = this.#shareNodes;
    const { bucket } = account;
    const share = bucket.burst / nodes;
    // The spell runs from the first stale check until a sync makes the limiter fresh again, as
    // `freshAt` changes only then. Before, it was named by the `sentAt` of the limiter's last
    // count, which a sync's reply sets a few microtasks before the sync makes it fresh: a check in
    // between opened a spell named after that sync, which the next real spell then took for its
    // own and went on from that bucket, whatever the node spent in between (the audit: 2,997
    // admitted where the bound was 2,000); and a limiter never counted (made while Redis was away
    // on a sync that had synced) had NaN, unequal to itself, so each check started its bucket
    // again and its refill never built up.
    const spell = this.#sync.freshAt(this);
    // What the spell's bucket starts from at its first check. Live credit only: a key with no live
    // loan would borrow blind, and a node cut off long enough drops out of the others' count, so
    // they lend themselves a larger share of the same burst (see the method doc).
    const live = now <= account.expiresAt;
    const credit = live ? this.#credit(account, now) : 0;
    if (!live) account.held = Math.min(0, account.held);
    const local = (account.local ??= new LocalBucket());
    if (local.take(cost, now, spell, account.held + credit, bucket, nodes)) {
      // Owed as far as the node's credit goes; past it, what the refill lets in is not, which
      // Redis's own refill over the same time covers when every node is cut off (see the class
      // doc).
      account.held = Math.min(account.held, Math.max(account.held - cost, -share));
      return ALLOWED;
    }
    return refusal(local.waitMs(cost, bucket, nodes));
  }
}

function refusal(retryAfterMs: number): LimiterDecision {
  return { allowed: false, retryAfterMs };
}
