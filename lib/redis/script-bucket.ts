/**
 * The sync script's part for one `SyncedLimiter` bucket: refill, the nodes' loans, debts and
 * leaves, and what the node is lent. Lua, spliced into `SYNC_SCRIPT` (script.ts, whose module
 * documentation says what each field holds and why), where the helpers it calls and the bounds it
 * reads are defined before it.
 *
 * @module
 */
export const BUCKET_ENTRY_LUA = `local function bucket_entry(k, a)
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
end`;
