/**
 * The sync script's part for one cell entry (a sketch, a window's sketch or exact counts, an
 * in-flight count): its registries, incarnation, leases, push and pull. Lua, spliced into
 * `SYNC_SCRIPT` (script.ts, whose module documentation says what each key holds and why), where
 * the helpers it calls and the bounds it reads are defined before it.
 *
 * @module
 */
export const CELL_ENTRY_LUA = `local function cell_entry(k, a)
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
end`;
