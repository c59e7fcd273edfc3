/**
 * A {@link SyncedLimiter} node's ledger: an account per key it has checked (up to
 * {@link MAX_ACCOUNTS}), the {@link Room} new keys find when they are all taken, and the loan
 * requests each sync carries for them, which settle the accounts when its reply comes. The
 * limiter decides checks from the accounts; this keeps them, and knows nothing of checks.
 *
 * @module
 */
import type { Account } from './account.js';
import type { LimiterConfig } from './limiter-options.js';
import type { LoanRequest } from './loan.js';
import { Room } from './room.js';

/**
 * Most keys one limiter asks loans for in one sync: about ten Redis operations each, so a sync
 * stays within a few milliseconds of the server's time. Keys that need tokens now go first (see
 * {@link Ledger.requests}), then the others in turn (the least recently asked first); keys past
 * it wait for the next sync, their demand counting meanwhile.
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
 * nothing (see {@link Ledger.account}), so a flood of distinct keys lets in new keys as fast as
 * syncs pay their debts (1,024 a sync), spread evenly over each sync period.
 */
const MAX_ACCOUNTS = 65_536;

/** What a ledger takes from its limiter's configuration. */
type LedgerConfig = Pick<LimiterConfig, 'sync' | 'base' | 'leaseMs' | 'bucket' | 'buckets'>;

/** The accounts of one limiter's keys on this node, and their loan requests. */
export class Ledger {
  readonly #config: LedgerConfig;
  readonly #accounts = new Map<string, Account>();
  /**
   * Accounts of keys checked once whose loan came in and paid their credit, oldest loan first:
   * what a flood of distinct keys leaves behind, and where a new key finds room when the oldest
   * account owes (see {@link account}).
   */
  readonly #room = new Room<Account>(performance.now());

  /** An empty ledger, made with its limiter from the limiter's `config`. */
  constructor(config: LedgerConfig) {
    this.#config = config;
  }

  /** How many accounts it holds: a closed limiter's, until Redis applied their leaves. */
  get size(): number {
    return this.#accounts.size;
  }

  /** The syncs {@link leaves} needs to give every key back, {@link MAX_LOANS} a sync. */
  syncsToLeave(): number {
    return Math.ceil(this.#accounts.size / MAX_LOANS);
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
  account(key: string): Account | undefined {
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
      const bucket = this.#config.buckets.get(key) ?? this.#config.bucket;
      account = {
        key,
        bucket,
        held: 0,
        demand: 0,
        idle: 0,
        short: false,
        checks: 0,
        expiresAt: 0,
        got: this.#config.sync.sequence,
        spare: 0,
        spareAt: 0,
        local: undefined,
      };
      this.#accounts.set(key, account);
    }
    return account;
  }

  /**
   * One loan request per account, up to {@link MAX_LOANS}, with `nodes` what its credit divides by:
   * those that need tokens now first (see {@link SyncedLimiter.loans}), the others in turn. A
   * key idle for {@link IDLE_SYNCS} syncs gives its tokens back and is forgotten.
   */
  requests(nodes: number): LoanRequest[] {
    const now = performance.now();
    this.#room.startPeriod(now);
    const urgent: Account[] = [];
    const others: Account[] = [];
    for (const account of this.#accounts.values()) {
      if (urgent.length === MAX_LOANS) break;
      if (this.#needsTokens(account, now, nodes)) urgent.push(account);
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

  /** A closed limiter's requests: a leave per account, up to {@link MAX_LOANS}. */
  leaves(): LoanRequest[] {
    // Every key leaves, MAX_LOANS a sync, each account kept until Redis applied its leave (see
    // #request): a leave whose sync failed goes again with the next, the others wait their turn
    // ({@link SyncedLimiter.pending}). Before, all were dropped with the first sync after close(),
    // so if it failed, what the node admitted on credit never reached Redis and its tokens were
    // written off only at the lease, and sync.close() said true; then all went in one call, which
    // with 65,536 keys held Redis for 2.1 s (the other nodes' syncs timed out) and with ioredis
    // past about 13,000 threw before it was sent, every sync after it too.
    this.#room.clear();
    const leaves: LoanRequest[] = [];
    for (const account of this.#accounts.values()) {
      if (leaves.length === MAX_LOANS) break;
      leaves.push(this.#request(account, true));
    }
    return leaves;
  }

  /**
   * Whether `account` needs tokens now, so that its loan request goes first (see
   * {@link SyncedLimiter.loans}).
   */
  #needsTokens(account: Account, now: number, nodes: number): boolean {
    if (account.demand === 0) return false;
    return account.short || now <= account.expiresAt || account.held <= -account.bucket.burst / (2 * nodes);
  }

  /** The loan request for `account`; a key with no demand and no debt (or `leave`) leaves. */
  #request(account: Account, leave = false): LoanRequest {
    const { bucket } = account;
    const { base, leaseMs } = this.#config;
    const now = performance.now();
    if (now > account.expiresAt) account.held = Math.min(0, account.held);
    const held = account.held;
    const { demand, idle, short } = account;
    account.idle = demand === 0 ? idle + 1 : 0;
    account.short = false;
    const leaving = leave || (account.idle >= IDLE_SYNCS && held >= 0);
    const want = leaving ? -1 : Math.max(0, demand - held);
    account.demand = 0;
    // A failed sync tells Redis nothing: the demand counts in the next one, and idle syncs are
    // counted only when they reach Redis. A key that left is gone (its loan lapses in Redis).
    const failed = () => {
      account.demand += demand;
      account.idle = idle;
      account.short ||= short;
    };
    return {
      key: `${base}:b:${account.key}`,
      rate: bucket.rate,
      burst: bucket.burst,
      cap: bucket.cap,
      leaseMs,
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
        if (performance.now() > sentAt + leaseMs) return;
        account.held += tokens;
        account.expiresAt = sentAt + leaseMs;
        account.got = seq;
        // Heard now, later than Redis counted it: the refill credited from here on is never early.
        account.spare = left;
        account.spareAt = performance.now();
        // Paid up, it may make room for a new key (unless checked again or made room for already).
        if (this.#mayMakeRoom(account)) this.#room.offer(account);
      },
      failed,
      overtaken: (seq) => {
        account.got = Math.max(account.got, seq);
        failed();
      },
    };
  }

  /**
   * Whether `account` may make room for a new key: still its key's account, checked once, and
   * owing nothing (forgetting a debt would admit the key twice).
   */
  #mayMakeRoom(account: Account): boolean {
    return account.checks === 1 && account.held >= 0 && this.#accounts.get(account.key) === account;
  }
}
