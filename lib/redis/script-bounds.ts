/**
 * What keepcount writes under its prefix, at most: the bounds the sync script (script.ts) takes
 * anything past for corrupt, or caps a value at. Each says why it cannot catch an honest value.
 *
 * @module
 */
import { MAX_LEASE_MS } from './sync-options.js';

/**
 * The longest liveness period a node sends: its `syncMs`, at most 3,600,000, times the 10 periods
 * (`LIVE_PERIODS`) the registry keeps it (cells.ts). keepcount scores no node registry member
 * past now plus this, and no layout registry member past now.
 */
const MAX_LIVE_MS = 10 * 3_600_000;

/**
 * How far ahead of Redis's clock a time keepcount wrote may read before it is taken for corrupt:
 * twice the longest it writes ahead (`MAX_LIVE_MS` for registries, `MAX_LEASE_MS` for leases and a
 * bucket's count time). A time written that far ahead reads further once Redis's clock steps back
 * (NTP, a VM resumed, a failover to a replica a little behind): with no margin, a review found
 * every lease at the longest `leaseMs` read as corrupt at a step back of milliseconds, its nodes
 * forgotten with their slots and loans and a false report sent. Twice the longest keeps honest
 * times through a step back of as much again, and still finds what no node writes (9e15, +inf).
 */
const AHEAD_FACTOR = 2;

/**
 * How far a bucket's values reach, in units of `cap + 1` of the node that syncs it (`+ 1` for a
 * bucket of no tokens): 2^32. A node's loan (`o:`, what it holds) is lent within its cap less what
 * the others hold, so it stays within the cap plus the others' debts, 16 caps in all (their credit
 * adds up to `burst × (1 + 1/2 + … + 1/N)` at most: limiter.ts), and a debt stays above −`burst`
 * (a node's credit never passes `burst / nodes`); a want within {@link BUCKET_WANT_SPAN}; tokens
 * at most `burst`, below zero by the cap of a node whose cap is larger, or by what closing nodes
 * owed, at most a `burst` each, which the refill pays back (README's bucket of 100 left at −108):
 * −2^32 caps takes four billion closes in debt with no refill between them. The span is judged by
 * the syncing node's cap, while the values may come from nodes of other settings: the caps of one
 * limit differ by less than 2^22 (they grow with `syncMs`, 1 ms to an hour), which leaves a margin
 * of 2^6 (a want's, 2^4) for nodes whose `burst` and rate differ too (a rolling reconfiguration).
 */
export const BUCKET_SPAN = 2 ** 32;

/**
 * How far past the sequence number a sync sends its node's record may go, under this process's
 * token (`p:<node>`), and still be one this process wrote: 2^32. A node numbers its syncs 1, 2, 3,
 * …, so a record ahead of a sync the node still waits on is none it wrote; but a sync the node gave
 * up on (its timeout) may still run after later ones (retried after a dropped connection, or
 * redirected in a cluster), and meets the record ahead by the numbers the node took meanwhile: it
 * must apply nothing (its cumulative values are older than the record's, its loan one the node
 * never takes in). The script cannot tell the two apart below the span. A node takes a number only
 * for a sync that sends a call, and each group has one call in flight at a time: at a call every
 * 20 µs, 2^32 numbers take a day, where a retried or redirected call waits seconds. Past the span,
 * the record is corrupt (the module doc). A sync that did run a day late would be applied as the
 * node's first: an entry's older values would stand until the node's next sync pushes its whole
 * contribution again, a bucket's loan would go to no one, and a leave would give its tokens back
 * twice.
 * Below the span the node tells them apart. It sends a key's calls one at a time, numbered up
 * (groups.ts: a group's next call only once the last one ended), and reads the reply only of the
 * call it still waits on: one it gave up on (its timeout) rejects first, and its reply, whenever
 * it comes, is never read. A client that sends a call again (after a reconnect, or a cluster's
 * `MOVED`/`ASK`) sends the same call, under the same number. So the reply of the call the node
 * waits on is of its highest number yet, and a record of this process's ahead of it is none it
 * wrote: the script applies nothing and tells the number (the reply's `3`, a loan's `−3`), the
 * node reports the key and numbers its next syncs past it (sync-call.ts), and they apply. Another
 * process cannot make use of it: the record must hold this process's token, which only this
 * process and Redis know, and a writer that can set it can set any count. Each such number lifts
 * the node's by at most the span, so 2^21 of them, one a sync, pass 2^53.
 */
export const SEQ_SPAN = 2 ** 32;

/**
 * The most a node asks a bucket for, in units of its `cap + 1`: 64 times what the bucket and its
 * loans ever hold. A node's want is its demand of a sync period (every check's cost, refused ones
 * too), else unbounded: one check of cost 10^15, or a flood, took the whole bucket however much
 * the other nodes asked for. Past this span shares no longer follow demand, but such a node is
 * refused nearly everything whatever it gets.
 */
export const BUCKET_WANT_SPAN = 2 ** 6;

/** How far ahead of Redis's clock a lease or a bucket's count time may read: see AHEAD_FACTOR. */
export const LEASE_AHEAD_MS = AHEAD_FACTOR * MAX_LEASE_MS;

/** How far ahead of Redis's clock a registry member may read: see {@link AHEAD_FACTOR}. */
export const LIVE_AHEAD_MS = AHEAD_FACTOR * MAX_LIVE_MS;
