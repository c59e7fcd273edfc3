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
 * and the bucket starts over full, the loans on it still counted. Either is reported once (the
 * values are gone after it). So does this process's own `s:<node>` more than `SEQ_SPAN` past its
 * sync's (see `B:m` above), with the node's other fields, and the sync applies as the node's first:
 * the node states what it holds (`held`) in every sync, and its last loan is not given back, the
 * number that told whether it was taken in being gone: a loan it never took in stays out of the
 * bucket (fewer admitted, never more). Ahead by less, the sync applies nothing and tells the
 * number (`-3`), as for an entry: the node numbers its syncs past it and sends that number as the
 * loan it last took in (`got`), so the loan recorded beside it is not given back either.
 *
 * KEYS: per cell entry its base, its registry and its layout registry, then one key per bucket
 * entry. The base is never a key that exists (the script touches only keys under it, all in its
 * slot): in a Redis Cluster slot being migrated, a call naming a missing key is answered `TRYAGAIN`,
 * so the script never runs while some of the entry's keys have moved and others not: Redis would
 * refuse its access to a moved key, which the script's `pcall` takes for a corrupt value, and it
 * would delete the entry's keys left on the source, mid-migration (a review saw it, with the base
 * made to exist).
 * ARGV: node id, registry lifetime (ms, also how long a layout stays live), pull limit,
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
import { BUCKET_ENTRY_LUA } from './script-bucket.js';
import { BUCKET_SPAN, BUCKET_WANT_SPAN, LEASE_AHEAD_MS, LIVE_AHEAD_MS, SEQ_SPAN } from './script-bounds.js';
import { CELL_ENTRY_LUA } from './script-cell.js';
import type { SendCommand } from './send.js';

export const SYNC_SCRIPT = `#!lua
local node, live, pull, entries, process = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a, out, foreign, corrupt = 6, {}, {}, {}
local MAX_LAYOUTS = 16
local LIVE_AHEAD = ${LIVE_AHEAD_MS}
local LEASE_AHEAD = ${LEASE_AHEAD_MS}
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
${CELL_ENTRY_LUA}
${BUCKET_ENTRY_LUA}
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
