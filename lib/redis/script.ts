/**
 * The sync script: one EVALSHA per sync carries every synced structure's push and pull.
 *
 * Each entry (a sketch, or one window of a rate) lives under a key base `B`:
 * - `B:c` hash cell → global count, the sum of every node's contribution;
 * - `B:n:<node>` hash cell → that node's contribution, its cumulative count, not a delta: a flush
 *   that Redis applied but whose reply was lost, sent again, sets the same values and adds
 *   nothing, and a flush that failed is simply superseded by the next one with larger values;
 * - `B:v` sorted set cell → the version that last changed it, so a node pulls only the cells
 *   changed since the version it last saw: the reply is proportional to the cells the fleet
 *   touched, not to the sketch size or the request count;
 * - `B:m` hash: `v` the version counter, `i` the incarnation (the server time when the entry was
 *   made: a restart that lost the data makes a new one, and nodes push their whole contribution
 *   again), `s:<node>` the last sequence number applied from each node. A sequence number at or
 *   below it is a stale flush (one that a timeout gave up on and that arrived after a newer one)
 *   and is not applied, so an older cumulative value never overwrites a newer one.
 * A second key per entry, the structure's node registry, is a sorted set node → last sync time:
 * the live node count for the "each node enforces its share" fail policy.
 *
 * A pull returns at most `pull` cells per entry, in version order, and only whole versions: when
 * more are waiting it stops before the first version it cannot finish and reports the version
 * before it, so the next pull resumes there. One version is one node's push, at most MAX_PUSH
 * cells, below `pull`, so every cut pull still advances.
 *
 * KEYS: per entry, its base and its registry. ARGV: node id, registry lifetime (ms), pull limit,
 * then per entry: sequence number, version last seen, lifetime in ms (0: none), cell count n, n pairs of
 * cell index and cumulative value. Reply, per entry: applied (0/1), version, incarnation, live
 * nodes, m, then m pairs of cell index and the others' count (global minus this node's).
 */
import { createHash } from 'node:crypto';
import type { SendCommand } from './send.js';

export const SYNC_SCRIPT = `
local node, live, pull = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local a, out = 4, {}
for k = 1, #KEYS, 2 do
  local base, registry = KEYS[k], KEYS[k + 1]
  local seq, since, ttl, n = ARGV[a], tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  a = a + 4
  local counts, versions, meta, mine = base .. ':c', base .. ':v', base .. ':m', base .. ':n:' .. node
  redis.call('HSETNX', meta, 'i', t[1] .. '.' .. t[2])
  local applied = 0
  if tonumber(seq) > tonumber(redis.call('HGET', meta, 's:' .. node) or '0') then
    applied = 1
    redis.call('HSET', meta, 's:' .. node, seq)
    if n > 0 then
      local version = redis.call('HINCRBY', meta, 'v', 1)
      for j = a, a + 2 * n - 1, 2 do
        local cell, value = ARGV[j], ARGV[j + 1]
        local old = redis.call('HGET', mine, cell) or '0'
        if old ~= value then
          redis.call('HINCRBY', counts, cell, string.format('%d', tonumber(value) - tonumber(old)))
          redis.call('HSET', mine, cell, value)
          redis.call('ZADD', versions, version, cell)
        end
      end
    end
  end
  a = a + 2 * n
  if ttl > 0 then
    for _, key in ipairs({counts, versions, meta, mine}) do redis.call('PEXPIRE', key, ttl) end
  end
  redis.call('ZADD', registry, now, node)
  redis.call('ZREMRANGEBYSCORE', registry, '-inf', now - live)
  redis.call('PEXPIRE', registry, live)
  local changed = redis.call('ZRANGEBYSCORE', versions, '(' .. since, '+inf', 'WITHSCORES', 'LIMIT', 0, pull + 1)
  local version = tonumber(redis.call('HGET', meta, 'v') or '0')
  local last = #changed
  if last > 2 * pull then
    local cut = changed[last]
    version = tonumber(cut) - 1
    last = 2 * pull
    while last > 0 and changed[last] == cut do last = last - 2 end
  end
  out[#out + 1] = applied
  out[#out + 1] = version
  out[#out + 1] = redis.call('HGET', meta, 'i')
  out[#out + 1] = redis.call('ZCARD', registry)
  out[#out + 1] = last / 2
  for j = 1, last, 2 do
    local cell = changed[j]
    out[#out + 1] = tonumber(cell)
    out[#out + 1] = tonumber(redis.call('HGET', counts, cell) or '0') - tonumber(redis.call('HGET', mine, cell) or '0')
  end
end
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
    if (!String((error as Error | undefined)?.message).includes('NOSCRIPT')) throw error;
    return send(['EVAL', SYNC_SCRIPT, ...tail]);
  }
}
