/**
 * The sync script: one EVALSHA per sync carries every synced structure's push and pull, and every
 * token loan a synced limiter asks for.
 *
 * Each cell entry (a sketch, one window of a rate, or one window of a quota's exact counts, whose
 * cells are key ids: `exact.ts`) lives under a key base `B`:
 * - `B:c` hash cell → global count, the sum of every node's contribution;
 * - `B:n:<node>` hash cell → that node's contribution, its cumulative count, not a delta: a flush
 *   that Redis applied but whose reply was lost, sent again, sets the same values and adds
 *   nothing, and a flush that failed is simply superseded by the next one with larger values;
 * - `B:v` sorted set cell → the version that last changed it, so a node pulls only the cells
 *   changed since the version it last saw: the reply is proportional to the cells the fleet
 *   touched, not to the sketch size or the request count;
 * - `B:m` hash: `v` the version counter, `i` the incarnation (the server time when the entry was
 *   made: a restart that lost the data makes a new one, and nodes push their whole contribution
 *   again; see below for a loss of some keys), `s:<node>` the last sequence number applied from each node and `l:<node>` the one
 *   that began the node's record (part of the incarnation the node is told), `p:<node>` the
 *   token of the process that wrote it (a process that restarts under a fixed node id counts its
 *   sequence numbers from 1 again: its syncs are refused until the old record's lease runs out,
 *   when it is forgotten as another node's would be, or for good on an entry without a lease,
 *   rather than taken over once the numbers catch up). A sequence number
 *   at or below `s:<node>` is a stale flush (one that a timeout gave up on and that arrived after
 *   a newer one) and is not applied, so an older cumulative value never overwrites a newer one.
 *   A node also sends the last sequence number Redis acknowledged applying for it: `s:<node>`
 *   below that means Redis lost applied pushes but kept the entry (a restart from an older RDB
 *   snapshot or append-only file, a failover to a replica that lagged), so contributions, counts
 *   and versions went back in time under the same `i`. The node's record then begins anew, which
 *   changes the incarnation it is told: it pushes its whole contribution again and pulls from
 *   version 0, since the versions it had pulled past are being handed out again.
 *   A process holds only the sequence numbers it sent, so its own record (its token in
 *   `p:<node>`) ahead of the sync it sends is either none it wrote or the sign of a late sync, one
 *   the node gave up on that runs after later ones (retried after a dropped connection, or
 *   redirected in a cluster), which must apply nothing. Only the gap tells them apart: no sync
 *   runs `SEQ_SPAN` (2^32) numbers late, so a record further ahead is corrupt (one `HSET` of it
 *   refused the node's syncs as another process's, `ERR_KEEPCOUNT_NODE_ID`, for good on an entry
 *   without a lease). The entry begins a new incarnation and is reported once (see below), the
 *   sync applied as the node's first: nothing of the old incarnation counts, so nothing counts
 *   twice, and every node, this one too, pushes its whole contribution into the new one, so
 *   nothing is lost. Were the sync a late one after all, its older values would stand only until
 *   the node's next sync, which pushes the whole contribution again (its incarnation changed).
 *   The token stays, so another live process under the node id is refused still. A record ahead
 *   by less applies nothing and is told (`3`, with its number) rather than refused as another
 *   process's: a late sync meets it, but the node never reads a late sync's reply, so a reply it
 *   reads says the record is none it wrote. The node then numbers its syncs past it, and the next
 *   one applies as any other, the record kept (before, one `HSET` of it just under 2^32 ahead
 *   failed the node's syncs as another process's for good: 13 years of 100 ms syncs to pass it).
 * Redis may lose one key of an entry and keep the others (maxmemory eviction takes keys one by
 * one; an operator may delete one), and a node's cumulative push over a lost contribution would
 * count it twice, over lost counts would count it once too few. So `B:c` and every `B:n:<node>`
 * carry the incarnation in their field `i`, and `B:v` a member `i` (score 0, never pulled): an
 * entry whose `B:m`, `B:c` or `B:v` is missing or of another incarnation, or whose syncing node
 * has a sequence number but no contribution, begins a new incarnation (its counts and versions
 * deleted), and a contribution of another incarnation counts as none. Every node then pushes its
 * whole contribution again, as after a restart that lost everything.
 * A second key per entry, the structure's node registry, is a sorted set node → the time until
 * which its last sync counts it live (that sync's time plus the node's own liveness period, so a
 * node that syncs less often than another is not dropped between its syncs by the other's
 * shorter period): the live node count for the "each node enforces its share" fail policy. A sync
 * drops the nodes a liveness period (its own) past that time: a dead node counts a little longer,
 * and a node of an earlier release, whose score is its last sync's time, counts as it did there.
 * No node's liveness period passes `MAX_LIVE_MS`, so a member scored later than twice that from now
 * (`AHEAD_FACTOR`, a margin for Redis's clock stepping back) is none keepcount wrote (a `ZADD` of
 * someone else's), and would count as live until its score, for good at +inf, cutting every
 * node's `'local'` share. A sync removes such members, from the layout registry (below) too, and
 * reports the registry as corrupt (see below), once.
 *
 * Nodes share an entry only if they put every key in the same cells: same sketch format, shape and
 * seed, which a node's layout names (`sketchLayout`). The layout is part of the base, so nodes
 * that disagree never mix their counts (each group counts apart), and a third key per entry, the
 * structure's layout registry, is a sorted set layout → last sync time: each sync replies with the
 * other layouts synced within the liveness period, so both sides of a misconfiguration, or of a
 * rolling reconfiguration, hear of it.
 *
 * A leased entry (an in-flight count) also has `B:l`, a sorted set node → lease expiry (server
 * time), renewed by each of the node's applied syncs, and a member `''` (score +inf, never reaped;
 * node ids are never empty) that marks it as of the entry's incarnation. Every sync first reaps the other nodes whose
 * lease ran out: it subtracts their contribution from `B:c` (as new versions, so every node pulls
 * the change) and deletes it, so the global count is the sum of the live nodes' contributions. A
 * reaped node that comes back begins a new record, which changes the incarnation it is told, so it
 * pushes its whole contribution again. No node's lease passes `MAX_LEASE_MS`, so a member other
 * than the marker scored later than twice that from now (`AHEAD_FACTOR`) is none keepcount wrote:
 * its contribution would stay in `B:c` until that score, for good at +inf, after the node it names
 * died. A sync forgets such members as reaped nodes (this node too, which then pushes its whole
 * contribution again), and reports `B:l` as corrupt (see below), once. All of a leased entry's
 * keys, every node's contribution included, get the same expiry at each sync: they never expire one
 * without the others.
 * Losing one of them would strand a dead node's slots in `B:c` for ever: without `B:l` nothing
 * reaps it, without its contribution nothing says how much to subtract. So a leased entry whose
 * `B:l` (or its marker) is missing begins a new incarnation, and so does one where a node in `B:l`
 * has no contribution: that node loses its record (as if reaped) and the live nodes push their
 * whole contributions again. The dead node's slots leave at once, without waiting for its lease.
 *
 * Every key keepcount touches is checked for its Redis type first. A key of another type (someone
 * else wrote under the prefix) would fail every sync with WRONGTYPE until it expired, or for ever:
 * it is deleted and handled as a lost key (a bucket starts over full), and its name and type go in
 * the reply, so the node reports it once. No command of the script can then fail on a type, so a
 * sync never stops half applied on one (Redis does not roll back a script's writes on an error).
 * A key of the right type may still hold values keepcount never writes (a count that is no
 * number, a version that names no cell or holds more than a pull takes): each entry runs under
 * `pcall`, and one that fails on its values has its keys deleted (a bucket, its hash) and is
 * handled as lost, the next sync rebuilding it; the reply tells the node (an incarnation
 * `corrupt`, so it pushes its whole contribution again; a bucket's loan not applied) and names the
 * key and the failure, and the other entries of the sync go on.
 *
 * The script opens with `#!lua` (Redis 7's flags syntax, declaring no flags), so that a Redis at
 * `maxmemory` refuses it whole, before it runs, with `OOM`: the sync fails and is reported and
 * retried like any other. Without it Redis runs it and refuses only its first write, the `pcall`
 * took that for corrupt values and deleted the entry, and the rest of the script wrote on: every
 * sync wiped the first structure's fleet-wide state while counting as a success.

 * A pull returns at most `pull` cells per entry, in version order, and only whole versions: when
 * more are waiting it stops before the first version it cannot finish and reports the version
 * before it, so the next pull resumes there, and the entry's newest version beside it (`behind`).
 * One version is one node's push, at most MAX_PUSH cells, or one chunk of at most `pull / 2` cells
 * of a reaped node, below `pull`, so every cut pull still advances. A version of more than `pull`
 * cells is none keepcount wrote: every pull would stop before it, for good, while the syncs
 * succeed, so it fails the entry as a corrupt value.
 * A node that joins a busy entry (or pulls one from version 0 again) cannot tell from versions when
 * it holds what the others had counted: a cell changed again gets a new version, so one that held
 * their count at the join and changes again before the pulls reach it moves ahead of them. Until it
 * is caught up, such a node sends a scan cursor (`0` to begin): a sync whose pull is cut short then
 * also runs `HSCAN B:c <cursor> COUNT <pull>` once and returns the cells it read (field `i` left
 * out) with the others' count of each, as the pull does, and the next cursor. A scan that went
 * through (cursor back to `0`) returned every cell held from its start to its end, with its value
 * when read, so at least what the others had counted at the join; cells are deleted only with the
 * whole entry (a new incarnation, which begins the scan again). A cursor is good only on the Redis
 * process that gave it: another one (Redis restarted with its data, a replica promoted, a slot
 * moved to another cluster node) hashes the cells into other buckets, and an old cursor walks them
 * out of order, skipping some. So a cursor that goes on travels as `<run_id>:<cursor>`, the
 * process's `run_id` (`INFO server`, read once a call and only when a scan goes on) beside the
 * HSCAN cursor, and one of another process begins the scan again, from `0` (a Redis user refused
 * INFO, `-@dangerous`, names none: its scans go on unchecked, as before). A node is caught up
 * once a scan went through or a pull was not cut short (it holds every cell: cells.ts
 * `PulledEntry`); a caught up node sends `-1` and costs Redis no scan.
 *
 * A bucket entry (one key of a synced limiter) is one hash, the fleet's token bucket for the key:
 * `t` its tokens and `at` when they were counted (server time), and per node `o:<node>` the tokens
 * on loan to it (negative: what it borrowed on credit), `w:<node>` what it last asked for,
 * `x:<node>` its lease expiry, `s:<node>` its last sequence number, `l:<node>` what that sync
 * lent it and `p:<node>` the token of the process that sent it (another process's sync under the
 * same node id is refused until that lease runs out). A node reports what it holds
 * and asks for more; the script refills the bucket at `rate` up to `burst`, and never above `cap`
 * minus everything on loan (so tokens in the bucket plus tokens held by nodes never pass `cap`),
 * then lends the node `min(want, tokens × want / all wants)` (a want counts up to
 * `BUCKET_WANT_SPAN` caps): a share in proportion to demand,
 * Doorman's proportional share. A node that leaves (want −1) gives its tokens back, or pays its debt from the bucket (which
 * may go below zero), once: a leave sent again after the node gave up on the reply to one applied
 * (its last request here later than the loan it last took in, and no lease field left) changes
 * nothing. Loans of nodes whose lease ran out are written off: their tokens are never
 * returned (the node dropped them itself by then), and a debt stays with the node, which reports it
 * when it comes back. A node also says which sync's loan it last took in (`got`): when its last
 * sync here is later, the node gave up on that reply (a timeout) and never took the loan, so the
 * loan goes back into the bucket, once (the next applied sync records its own loan in its place).
 * A bucket's values are bounded by what keepcount writes (`BUCKET_SPAN`), and anything past that is
 * none keepcount wrote, which Redis keeps for as long as syncs renew the bucket: a node's fields
 * whose lease is later than twice `MAX_LEASE_MS` from now (its loan would count, and its want take
 * the bucket's share, until then), or whose loan, want or last loan lies outside the span, go as a
 * lapsed lease's do; tokens below the span (a debt no fleet runs up, which the refill would take
 * ages to pay) or a count time later than twice `MAX_LEASE_MS` from now (no refill until then) go,
 * and the bucket starts over full, the loans on it still counted. Either is reported once (the values
 * are gone after it). So does this process's own `s:<node>` more than `SEQ_SPAN` past its sync's
 * (see `B:m` above), with the node's other fields, and the sync applies as the node's first: the
 * node states what it holds (`held`) in every sync, and its last loan is not given back, the
 * number that told whether it was taken in being gone: a loan it never took in stays out of the
 * bucket (fewer admitted, never more). Ahead by less, the sync applies nothing and tells the
 * number (`-3`), as for an entry: the node numbers its syncs past it and sends that number as the
 * loan it last took in (`got`), so the loan recorded beside it is not given back either.
 *
 * KEYS: per cell entry its base, its registry and its layout registry, then one key per bucket
 * entry. ARGV: node id, registry lifetime (ms, also how long a layout stays live), pull limit,
 * number of cell entries, the process's token (a random id per RedisSync); then per cell entry: sequence number, the last sequence number Redis
 * acknowledged applying (0: none), version last seen, lifetime in ms (0: none), lease in ms (0:
 * none), layout, scan cursor (`-1`: no scan; `0`: begin one; else `<run_id>:<cursor>`, as a reply
 * gave it), cell count n, n
 * pairs of cell index and cumulative value; then per bucket entry: sequence number, rate (tokens
 * per ms), burst (the tokens of a new bucket), cap, lease in ms, lifetime in ms (0: none), tokens
 * held, tokens wanted (−1: leaving), the sequence number whose loan it last took in. Reply, per
 * cell entry: applied (1; 0 not applied, 2 not applied and Redis holds a later sequence number of
 * this node id: another process uses it; 3 not applied and Redis holds a later one under this
 * process's token, which the version then is, as a string: `SEQ_SPAN`), version, the entry's
 * newest version (past version when the pull was cut short: more versions wait), incarnation,
 * live nodes, m,
 * then m pairs of cell index and the others' count (global minus this node's, as a string: Redis
 * would truncate a Lua number to a 64-bit integer reply), the scan's next cursor (`0`: it went
 * through; `-1`: none ran; else `<run_id>:<cursor>`, this Redis process's id and the HSCAN
 * cursor), s and s pairs of cell index and the others' count it read, o and the
 * o other live layouts (at most 16: enough to report a misconfiguration, and a fleet where every node has
 * its own seed does not make every reply as long as the fleet); then per bucket
 * entry the tokens lent and the tokens left in the bucket after lending them, as strings (−1 and 0
 * when the sync was not applied: a stale sequence number, e.g. a client that sent the script again
 * after a dropped connection, whose first run lent what the node then never took in; −2 and 0 when
 * the bucket holds a later sequence number of this node id; −3 and that number when it is this
 * process's, under its token); then f, the number of keys of another type deleted, and f pairs
 * of key and the type it held; then c, the
 * number of entries deleted for corrupt values, and c pairs of key (an entry's base, or a bucket)
 * and what failed; last, the server's time in epoch milliseconds (fractional), which nodes fix
 * synced windows on.
 */
import { createHash } from 'node:crypto';
import type { SendCommand } from './send.js';
import { MAX_LEASE_MS } from './sync-options.js';

/**
 * The longest liveness period a node sends: its `syncMs`, at most 3,600,000, times the 10 periods
 * (`LIVE_PERIODS`) the registry keeps it (sync-call.ts). keepcount scores no node registry member
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
const BUCKET_SPAN = 2 ** 32;

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
const SEQ_SPAN = 2 ** 32;

/**
 * The most a node asks a bucket for, in units of its `cap + 1`: 64 times what the bucket and its
 * loans ever hold. A node's want is its demand of a sync period (every check's cost, refused ones
 * too), else unbounded: one check of cost 10^15, or a flood, took the whole bucket however much
 * the other nodes asked for. Past this span shares no longer follow demand, but such a node is
 * refused nearly everything whatever it gets.
 */
const BUCKET_WANT_SPAN = 2 ** 6;

export const SYNC_SCRIPT = `#!lua
local node, live, pull, entries, process = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a, out, foreign, corrupt = 6, {}, {}, {}
local MAX_LAYOUTS = 16
local LIVE_AHEAD = ${AHEAD_FACTOR * MAX_LIVE_MS}
local LEASE_AHEAD = ${AHEAD_FACTOR * MAX_LEASE_MS}
local BUCKET_SPAN = ${BUCKET_SPAN}
local BUCKET_WANT_SPAN = ${BUCKET_WANT_SPAN}
local SEQ_SPAN = ${SEQ_SPAN}
local function number(x) return string.format('%.17g', x) end
local function count(x)
  local value = tonumber(x)
  if value == nil or value ~= value or value > 2^63 or value < -2^63 then
    error('"' .. string.sub(tostring(x), 1, 40) .. '" where a number belongs')
  end
  return value
end
-- This Redis process's id (INFO's run_id), read at most once a call and only for a catch-up scan
-- under way: an HSCAN cursor is good only on the process that gave it (cell_entry). '' when the
-- user may not run INFO (an ACL without @dangerous): the scan goes on with its cursor, unchecked,
-- rather than fail the entry, which the pcall of cell_entry would delete as corrupt.
local run_id
local function server()
  if run_id == nil then
    local info = redis.pcall('INFO', 'server')
    run_id = type(info) == 'string' and string.match(info, 'run_id:(%w+)') or ''
  end
  return run_id
end
local function own(key, kind)
  local found = redis.call('TYPE', key).ok
  if found == kind then return true end
  if found ~= 'none' then
    redis.call('DEL', key)
    foreign[#foreign + 1] = key
    foreign[#foreign + 1] = found
  end
  return false
end
-- Names in the reply a key holding values keepcount never writes (of the right Redis type), for the
-- node to report once: an entry that fails on them (its keys are deleted and rebuilt as after a
-- loss, and the other entries of the sync go on), or a registry (trim).
local function corrupted(key, e)
  if type(e) == 'table' then e = e.err end
  corrupt[#corrupt + 1] = key
  corrupt[#corrupt + 1] = string.sub(tostring(e), 1, 200)
end
-- A registry member scored past the longest liveness period from now is none keepcount wrote: it
-- would count as a live node (or name a layout) until that score, for good at +inf. It goes, and
-- the node reports it once.
local function trim(registry)
  local removed = redis.call('ZREMRANGEBYSCORE', registry, '(' .. (now + LIVE_AHEAD), '+inf')
  if removed > 0 then corrupted(registry, removed .. ' members scored past ' .. LIVE_AHEAD .. ' ms from now, removed') end
end
local function incarnation(counts, versions, meta, mine, prior, leases, intact)
  local i = redis.call('HGET', meta, 'i')
  if intact and i and redis.call('HGET', counts, 'i') == i and redis.call('ZSCORE', versions, 'i')
    and (prior == 0 or redis.call('EXISTS', mine) == 1) and (not leases or redis.call('ZSCORE', leases, '')) then
    return i
  end
  i = t[1] .. '.' .. t[2]
  redis.call('DEL', counts, versions)
  redis.call('HSET', meta, 'i', i)
  redis.call('HSET', counts, 'i', i)
  redis.call('ZADD', versions, 0, 'i')
  if leases then redis.call('ZADD', leases, '+inf', '') end
  return i
end
-- Takes node \`who\`'s contribution out of the entry and forgets its record: a node whose lease ran out.
local function forget(base, counts, versions, meta, leases, i, who)
  local theirs = base .. ':n:' .. who
  local held = {}
  if redis.call('HGET', theirs, 'i') == i then held = redis.call('HGETALL', theirs) end
  local version, chunk = 0, 0
  for j = 1, #held, 2 do
    if held[j] ~= 'i' and held[j + 1] ~= '0' then
      if chunk == 0 then version = redis.call('HINCRBY', meta, 'v', 1) end
      chunk = (chunk + 1) % (pull / 2)
      redis.call('HINCRBY', counts, held[j], string.format('%d', -count(held[j + 1])))
      redis.call('ZADD', versions, version, held[j])
    end
  end
  redis.call('DEL', theirs)
  redis.call('HDEL', meta, 's:' .. who, 'l:' .. who, 'p:' .. who)
  redis.call('ZREM', leases, who)
end
local function reap(base, counts, versions, meta, leases, i)
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', '(' .. now)) do
    if other ~= node then forget(base, counts, versions, meta, leases, i, other) end
  end
end
local function cell_entry(k, a)
  local res = {}
  local base, registry, layouts = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local seq, acked, since, ttl, lease, layout, scan, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5], ARGV[a + 6], tonumber(ARGV[a + 7])
  a = a + 8
  local counts, versions, meta, mine, leases = base .. ':c', base .. ':v', base .. ':m', base .. ':n:' .. node, base .. ':l'
  for _, key in ipairs({counts, meta, mine}) do own(key, 'hash') end
  for _, key in ipairs({versions, registry, layouts}) do own(key, 'zset') end
  trim(registry)
  redis.call('ZADD', registry, now + live, node)
  redis.call('ZREMRANGEBYSCORE', registry, '-inf', '(' .. (now - live))
  if redis.call('PTTL', registry) < 2 * live then redis.call('PEXPIRE', registry, 2 * live) end
  trim(layouts)
  redis.call('ZADD', layouts, now, layout)
  redis.call('ZREMRANGEBYSCORE', layouts, '-inf', now - live)
  redis.call('PEXPIRE', layouts, live)
  local intact, late = true, {}
  if lease > 0 and own(leases, 'zset') then
    -- Leases later than the longest from now are none keepcount wrote (the module doc): forgotten
    -- below, once the incarnation is known, or here already if their contribution is missing.
    for _, other in ipairs(redis.call('ZRANGEBYSCORE', leases, '(' .. (now + LEASE_AHEAD), '+inf')) do
      if other ~= '' then late[#late + 1] = other end
    end
    for _, other in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
      if other ~= '' and not own(base .. ':n:' .. other, 'hash') then
        intact = false
        redis.call('ZREM', leases, other)
        redis.call('HDEL', meta, 's:' .. other, 'l:' .. other, 'p:' .. other)
      end
    end
  end
  local prior = count(redis.call('HGET', meta, 's:' .. node) or '0')
  -- This process's record past SEQ_SPAN ahead of its sync is none it wrote: it begins anew, in a
  -- new incarnation, into which every node pushes its whole contribution (the module doc). Its
  -- token stays, so no other process under this node id takes the record meanwhile.
  if prior > tonumber(seq) + SEQ_SPAN and redis.call('HGET', meta, 'p:' .. node) == process then
    local seen = redis.call('HGET', meta, 's:' .. node)
    corrupted(base, 's:' .. node .. ' ' .. seen .. ', more than ' .. SEQ_SPAN .. ' past the sync ' .. seq)
    redis.call('HDEL', meta, 's:' .. node, 'l:' .. node)
    intact, prior = false, 0
  end
  local i = incarnation(counts, versions, meta, mine, prior, lease > 0 and leases, intact)
  if redis.call('HGET', mine, 'i') ~= i then
    redis.call('DEL', mine)
    redis.call('HSET', mine, 'i', i)
  end
  if lease > 0 then
    reap(base, counts, versions, meta, leases, i)
    for _, other in ipairs(late) do
      forget(base, counts, versions, meta, leases, i, other)
      if other == node then
        redis.call('HSET', mine, 'i', i)
        prior = 0
      end
    end
    if #late > 0 then
      corrupted(leases, #late .. ' members scored past ' .. LEASE_AHEAD .. ' ms from now, their nodes forgotten')
    end
  end
  -- Another process synced under this node id and its lease ran out (a live one's record refused
  -- the whole call: held_cell): this process forgets it as another node would. Sequence numbers
  -- alone let a restart that had synced as often as the old process take its record over.
  local owner = redis.call('HGET', meta, 'p:' .. node)
  if owner and owner ~= process then
    forget(base, counts, versions, meta, leases, i, node)
    redis.call('HSET', mine, 'i', i)
    prior = 0
  end
  -- A record ahead of the sync under no token is refused as another process's (2). One under this
  -- process's own is told, with its number (3): a late sync meets it, but the node never reads a
  -- late sync's reply, so one it reads says the record is none it wrote (SEQ_SPAN). Neither
  -- applies.
  local applied = 0
  if tonumber(seq) < prior then applied = owner == process and 3 or 2 end
  if applied == 0 and tonumber(seq) > prior then
    applied = 1
    redis.call('HSET', meta, 's:' .. node, seq, 'p:' .. node, process)
    if prior < acked then redis.call('HSET', meta, 'l:' .. node, seq) end
    redis.call('HSETNX', meta, 'l:' .. node, seq)
    if lease > 0 then redis.call('ZADD', leases, now + lease, node) end
    if n > 0 then
      local version = redis.call('HINCRBY', meta, 'v', 1)
      for j = a, a + 2 * n - 1, 2 do
        local cell, value = ARGV[j], ARGV[j + 1]
        local old = redis.call('HGET', mine, cell) or '0'
        if old ~= value then
          redis.call('HINCRBY', counts, cell, string.format('%d', tonumber(value) - count(old)))
          redis.call('HSET', mine, cell, value)
          redis.call('ZADD', versions, version, cell)
        end
      end
    end
  end
  if ttl > 0 then
    for _, key in ipairs({counts, versions, meta, mine}) do redis.call('PEXPIRE', key, ttl) end
    if lease > 0 then
      redis.call('PEXPIRE', leases, ttl)
      for _, other in ipairs(redis.call('ZRANGE', leases, 0, -1)) do
        if other ~= '' then redis.call('PEXPIRE', base .. ':n:' .. other, ttl) end
      end
    end
  end
  local changed = redis.call('ZRANGEBYSCORE', versions, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', 0, pull + 1)
  local version = count(redis.call('HGET', meta, 'v') or '0')
  local head, last = version, #changed
  if last > 2 * pull then
    local cut = changed[last]
    version = tonumber(cut) - 1
    last = 2 * pull
    while last > 0 and changed[last] == cut do last = last - 2 end
    if last == 0 then error('version ' .. cut .. ' holds more than ' .. pull .. ' cells') end
  end
  local told = i .. '/' .. (redis.call('HGET', meta, 'l:' .. node) or '')
  res[#res + 1] = applied
  res[#res + 1] = applied == 3 and number(prior) or version
  res[#res + 1] = head
  res[#res + 1] = told
  res[#res + 1] = redis.call('ZCARD', registry)
  res[#res + 1] = last / 2
  for j = 1, last, 2 do
    local cell = changed[j]
    res[#res + 1] = count(cell)
    res[#res + 1] = number(count(redis.call('HGET', counts, cell) or '0') - count(redis.call('HGET', mine, cell) or '0'))
  end
  -- The catch-up scan: only for a node not caught up (it sends a cursor) whose pull was cut short
  -- (one that was not holds everything already). A cursor is good only on the Redis process that
  -- gave it, which names it (\`<run_id>:<cursor>\`): another one (restarted, promoted, or given the
  -- slot) hashes the cells into other buckets, so it begins the scan again.
  local scanned, cursor = {}, '-1'
  if scan ~= '-1' and version < head then
    local id, at = string.match(scan, '^(%w*):(%d+)$')
    if not at or id ~= server() then at = '0' end
    local found = redis.call('HSCAN', counts, at, 'COUNT', pull)
    cursor = found[1]
    if cursor ~= '0' then cursor = server() .. ':' .. cursor end
    for j = 1, #found[2], 2 do
      local cell = found[2][j]
      if cell ~= 'i' then
        scanned[#scanned + 1] = count(cell)
        scanned[#scanned + 1] = number(count(found[2][j + 1]) - count(redis.call('HGET', mine, cell) or '0'))
      end
    end
  end
  res[#res + 1] = cursor
  res[#res + 1] = #scanned / 2
  for j = 1, #scanned do res[#res + 1] = scanned[j] end
  local others = {}
  for _, other in ipairs(redis.call('ZRANGE', layouts, 0, MAX_LAYOUTS)) do
    if other ~= layout and #others < MAX_LAYOUTS then others[#others + 1] = other end
  end
  res[#res + 1] = #others
  for _, other in ipairs(others) do res[#res + 1] = other end
  return res
end
local function bucket_entry(k, a)
  local bucket = KEYS[k]
  local seq, rate, burst, cap = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local lease, ttl, held, want, got = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8])
  own(bucket, 'hash')
  local f, flat = {}, redis.call('HGETALL', bucket)
  for j = 1, #flat, 2 do f[flat[j]] = flat[j + 1] end
  -- A want past its span would take every other node's share (BUCKET_WANT_SPAN).
  if want > 0 then want = math.min(want, BUCKET_WANT_SPAN * (cap + 1)) end
  -- Values no node writes (the module doc): a node's past its lease or span go as a lapsed
  -- lease's, tokens past the span as a lost bucket's. Each goes at once, so it is reported once.
  local span, gone, why = BUCKET_SPAN * (cap + 1), {}, nil
  -- This process's own sequence number more than SEQ_SPAN past its sync's is none it wrote (the
  -- module doc): its fields go too, and the sync applies as the node's first here.
  if f['p:' .. node] == process and count(f['s:' .. node] or '0') > seq + SEQ_SPAN then
    gone[1], f['x:' .. node] = node, nil
    why = 's:' .. node .. ' ' .. f['s:' .. node] .. ', more than ' .. SEQ_SPAN .. ' past the sync ' .. number(seq)
  end
  for field, value in pairs(f) do
    local other = string.sub(field, 3)
    local x = string.sub(field, 1, 2) == 'x:' and count(value)
    if x and x >= now then
      local bad
      if x > now + LEASE_AHEAD then bad = field .. ' ' .. value .. ', past ' .. LEASE_AHEAD .. ' ms from now' end
      for _, kind in ipairs({'o:', 'w:', 'l:'}) do
        local v = count(f[kind .. other] or '0')
        if not bad and (v > span or v < (kind == 'o:' and -span or 0)) then
          local low = kind == 'o:' and '-' .. number(span) or '0'
          bad = kind .. other .. ' ' .. f[kind .. other] .. ', outside ' .. low .. ' to ' .. number(span)
        end
      end
      if bad then
        gone[#gone + 1] = other
        why = why or bad
      end
    end
  end
  for _, other in ipairs(gone) do
    redis.call('HDEL', bucket, 'o:' .. other, 'w:' .. other, 'x:' .. other, 's:' .. other, 'l:' .. other, 'p:' .. other)
    f['o:' .. other], f['w:' .. other], f['x:' .. other], f['s:' .. other], f['l:' .. other], f['p:' .. other] = nil, nil, nil, nil, nil, nil
  end
  if #gone > 0 then corrupted(bucket, 'the fields of ' .. #gone .. ' node(s) removed: ' .. why) end
  why = nil
  if f.t and count(f.t) < -span then why = 't ' .. f.t .. ', below -' .. number(span) end
  if f.at and count(f.at) > now + LEASE_AHEAD then why = 'at ' .. f.at .. ', past ' .. LEASE_AHEAD .. ' ms from now' end
  if why then
    redis.call('HDEL', bucket, 't', 'at')
    f.t, f.at = nil, nil
    corrupted(bucket, why .. ': the bucket starts over full')
  end
  local lent, left, last = -1, 0, count(f['s:' .. node] or '0')
  -- Another process synced this bucket under this node id and its lease ran out, or it left (a
  -- live one's refused the whole call: held_bucket): its fields go as another node's would.
  local owner = f['p:' .. node]
  if owner and owner ~= process then
    redis.call('HDEL', bucket, 'o:' .. node, 'w:' .. node, 'x:' .. node, 's:' .. node, 'l:' .. node, 'p:' .. node)
    f['o:' .. node], f['w:' .. node], f['x:' .. node], f['s:' .. node], f['l:' .. node] = nil, nil, nil, nil, nil
    last = 0
  end
  -- Ahead of the sync, nothing applies; this process's own record is told with its number, as in
  -- cell_entry: the node numbers its syncs past it and sends it as its got (the module doc).
  if seq < last then
    lent = owner == process and -3 or -2
    if lent == -3 then left = last end
  end
  -- A leave sent again after the node gave up on the reply to one Redis applied: its last request
  -- here, later than any loan it took in, left (its lease field is gone; only a leave removes it
  -- and keeps s:). Applied again, it would give its tokens back, or pay its debt, twice.
  if seq > last and want < 0 and last > got and f['x:' .. node] == nil then
    redis.call('HSET', bucket, 's:' .. node, seq, 'p:' .. node, process)
    return {'0', number(count(f.t or burst))}
  end
  if seq > last then
    lent = 0
    local lent_out, wanted = 0, want
    for field, value in pairs(f) do
      local other = string.sub(field, 3)
      if string.sub(field, 1, 2) == 'x:' and other ~= node then
        if count(value) < now then
          redis.call('HDEL', bucket, 'o:' .. other, 'w:' .. other, 'x:' .. other, 's:' .. other, 'l:' .. other, 'p:' .. other)
        else
          lent_out = lent_out + count(f['o:' .. other] or '0')
          wanted = wanted + count(f['w:' .. other] or '0')
        end
      end
    end
    local tokens, at = count(f.t or burst), count(f.at or now)
    if last > got then tokens = tokens + count(f['l:' .. node] or '0') end
    if want >= 0 then lent_out = lent_out + held else tokens = tokens + held end
    tokens = math.min(burst, cap - lent_out, tokens + rate * math.max(0, now - at))
    if want >= 0 then
      if want > 0 and tokens > 0 then
        lent = math.min(want, tokens * want / wanted)
        tokens = tokens - lent
      end
      redis.call('HSET', bucket, 'o:' .. node, number(held + lent), 'w:' .. node, number(want), 'x:' .. node, now + lease, 'l:' .. node, number(lent))
    else
      redis.call('HDEL', bucket, 'o:' .. node, 'w:' .. node, 'x:' .. node, 'l:' .. node)
    end
    redis.call('HSET', bucket, 't', number(tokens), 'at', now, 's:' .. node, seq, 'p:' .. node, process)
    left = tokens
    if ttl > 0 then redis.call('PEXPIRE', bucket, ttl) else redis.call('PERSIST', bucket) end
  end
  return {number(lent), number(left)}
end
-- Whether another live process holds this node id's record in an entry or bucket: checked for
-- every part of the call before any is applied, so that a refused sync applies nothing (before,
-- its buckets lent while its entries refused, and the node, told the sync failed, asked again).
-- A record whose lease ran out is not held: the part forgets it when applied. Unreadable values
-- (another type) hold nothing: the part deals with them.
local function held_cell(k, a)
  local owner = redis.call('HGET', KEYS[k] .. ':m', 'p:' .. node)
  if not owner or owner == process then return false end
  if tonumber(ARGV[a + 4]) == 0 then return true end
  local lease = count(redis.call('ZSCORE', KEYS[k] .. ':l', node) or '0')
  return lease >= now and lease <= now + LEASE_AHEAD
end
local function held_bucket(k)
  local owner = redis.call('HGET', KEYS[k], 'p:' .. node)
  if owner == false or owner == process then return false end
  local lease = count(redis.call('HGET', KEYS[k], 'x:' .. node) or '0')
  return lease >= now and lease <= now + LEASE_AHEAD
end
local held, b = false, a
for k = 1, 3 * entries, 3 do
  local ok, yes = pcall(held_cell, k, b)
  held = held or (ok and yes)
  b = b + 8 + 2 * tonumber(ARGV[b + 7])
end
for k = 3 * entries + 1, #KEYS do
  local ok, yes = pcall(held_bucket, k)
  held = held or (ok and yes)
end
if held then
  for k = 1, 3 * entries, 3 do
    for _, x in ipairs({2, 0, 0, '', 1, 0, '-1', 0, 0}) do out[#out + 1] = x end
  end
  for k = 3 * entries + 1, #KEYS do
    out[#out + 1] = '-2'
    out[#out + 1] = '0'
  end
  out[#out + 1] = 0
  out[#out + 1] = 0
  out[#out + 1] = number(tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)
  return out
end
for k = 1, 3 * entries, 3 do
  local n = tonumber(ARGV[a + 7])
  local ok, res = pcall(cell_entry, k, a)
  if not ok then
    local base = KEYS[k]
    corrupted(base, res)
    redis.call('DEL', base .. ':c', base .. ':v', base .. ':m', base .. ':n:' .. node, base .. ':l')
    local nodes = redis.pcall('ZCARD', KEYS[k + 1])
    res = {0, 0, 0, 'corrupt', type(nodes) == 'number' and nodes or 1, 0, '-1', 0, 0}
  end
  for _, x in ipairs(res) do out[#out + 1] = x end
  a = a + 8 + 2 * n
end
for k = 3 * entries + 1, #KEYS do
  local ok, res = pcall(bucket_entry, k, a)
  if not ok then
    corrupted(KEYS[k], res)
    redis.call('DEL', KEYS[k])
    res = {'-1', '0'}
  end
  out[#out + 1] = res[1]
  out[#out + 1] = res[2]
  a = a + 9
end
out[#out + 1] = #foreign / 2
for j = 1, #foreign do out[#out + 1] = foreign[j] end
out[#out + 1] = #corrupt / 2
for j = 1, #corrupt do out[#out + 1] = corrupt[j] end
out[#out + 1] = number(tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)
return out
`;

const SYNC_SHA = createHash('sha1').update(SYNC_SCRIPT).digest('hex');

/**
 * Runs the script by its SHA1; on `NOSCRIPT` (first use, or a server that restarted or flushed its
 * script cache) sends it whole with EVAL, which also caches it for the next EVALSHA.
 */
export async function runSyncScript(send: SendCommand, keys: string[], args: string[]): Promise<unknown> {
  const tail = [String(keys.length), ...keys, ...args];
  try {
    return await send(['EVALSHA', SYNC_SHA, ...tail]);
  } catch (error) {
    if (!isNoScript(error)) throw error;
    return send(['EVAL', SYNC_SCRIPT, ...tail]);
  }
}

/**
 * Whether the client rejected with Redis's `NOSCRIPT`. Reading the rejection may throw (a getter,
 * a `Proxy`, an object with no prototype): such a rejection is no NOSCRIPT, and goes on as the
 * client's value, not the getter's error (sync-errors.ts reports it).
 */
function isNoScript(error: unknown): boolean {
  try {
    return String((error as Error | undefined)?.message).includes('NOSCRIPT');
  } catch {
    return false;
  }
}
