--[[ pushing: push.lua's constants and per-message helpers.

  In the function library (ADR 41) an include's definitions are made once, at FUNCTION LOAD,
  while a script body's own locals, tables and closures are made again on every call: what the
  push body needs besides its per-call state lives here (ADR 44).
]]
--- @include "deps"

-- the longest task or tenant id (the id grammar of fairque_core validation)
local FQ_MAX_ID_LEN = 128
local FQ_ID_PATTERN = '^[%w_%.:@/%+=#%-]+$'
-- ARGV values per message before its D parent ids: id, tenant, priority, delay, meta, body,
-- unique key, unique window, D
local FQ_MESSAGE_FIELDS = 9
-- the zeros that pad a formatted push sequence of 1-16 digits to FQ_SEQ_WIDTH (fq_member)
local FQ_SEQ_PADS = {'000000000000000', '00000000000000', '0000000000000', '000000000000', '00000000000', '0000000000', '000000000', '00000000', '0000000', '000000', '00000', '0000', '000', '00', '0', ''}
-- the priorities as the client spells them (fq_int): any other spelling of a number is refused
local FQ_PRIORITY_OF = {['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6}
local function fq_valid_id(s)
  local len = #s
  return len >= 1 and len <= FQ_MAX_ID_LEN and FQ_FIND(s, FQ_ID_PATTERN) ~= nil
end

-- `key` holds another type than `want`: the damage (`<key> <type> <wanted>`, FQ_E_DAMAGED's
-- detail)
local function fq_damage(key, want)
  return key .. ' ' .. FQ_CALL('TYPE', key)['ok'] .. ' ' .. want
end

-- a key this call will write holds another type (damaged behind the client's back): refuse
-- the whole call, typed, before the first write. `probe` is a cheap read of that type; its
-- reply is returned
local function fq_probe(key, probe, want)
  local reply = FQ_PCALL(probe, key)
  if FQ_TYPE(reply) == 'table' then error(fq_err('DAMAGED', fq_damage(key, want))) end
  return reply
end

--[[ What push.lua and the intake's ingest (intake.lua) share for a message that is ready now:
  the type checks of its tenant's keys and the store. `pc` is the call's push state:
  pc.checked[key] a tenant queue or hash type-checked in this call (pc.checked[u]: tenant id u
  is valid; a key always holds the hash tag's '{', outside the id grammar, so no id is ever a
  key); pc.had_ready[u] a queue of u checked in this call already held ready work (so, without
  limits, u is active: see fq_push_ready); pc.now_s the formatted clock; pc.score_p and
  pc.score_s the last priority scored and its score.
]]

-- the type checks of tenant u's keys a message of priority p writes: its queue and its hash
-- (each once per call). nil, or the damage (fq_damage)
local function fq_push_probe(q, pc, u, p)
  local checked = pc.checked
  local critical = p == FQ_CRITICAL_PRIORITY
  local queue = critical and fq_critical_key(q, u) or fq_normal_key(q, u)
  if not checked[queue] then
    local size = FQ_PCALL(critical and 'LLEN' or 'ZCARD', queue)
    if FQ_TYPE(size) == 'table' then return fq_damage(queue, critical and 'list' or 'zset') end
    checked[queue] = true
    if size > 0 then pc.had_ready[u] = true end
  end
  local tkey = fq_tenant_key(q, u)
  if not checked[tkey] then
    if FQ_TYPE(FQ_PCALL('HLEN', tkey)) == 'table' then return fq_damage(tkey, 'hash') end
    checked[tkey] = true
  end
  return nil
end

-- the next push sequence number (fq_next_seq inline: fq_open with meta has read q.seq) for a
-- message of u being stored, counted in u's `pushed` (the caller counts the queue's)
local function fq_push_number(q, u)
  local seq = q.seq + 1
  q.seq = seq
  q.meta_dirty = true
  local tc = q.tenant_counters[u]
  if tc == nil then
    tc = {}
    q.tenant_counters[u] = tc
  end
  tc.pushed = (tc.pushed or 0) + 1
  return seq
end

-- store message `id` of u (priority p as the client spells it, ps; delay dmss <= 0; meta and
-- body), ready now: the common case of push, and every message the intake holds. Numbered
-- (fq_push_number), one HSET of its record at `key` (checked by the caller), into its
-- tenant's queue; the tenant activated
local function fq_push_ready(q, pc, key, id, u, p, ps, dmss, meta, body)
  local seq_s = fq_int(fq_push_number(q, u))
  q.seq_s = seq_s
  local now_s = pc.now_s
  FQ_CALL('HSET', key, 'u', u, 'p', ps, 'b', body, 'm', meta, 'rc', '0',
    'seq', seq_s, 'st', 'queued', 'rd', now_s, 'due', now_s, 'dms', dmss, 'rec', '0')
  -- Without limits a tenant is active exactly while it has ready work, unless paused (and
  -- fq_activate keeps a paused one out anyway), so one that already had some (the size read
  -- by the type check) needs no activation check: no tenant hash read, no ZSCORE
  local active = q.active_cache
  if pc.had_ready[u] and not q.lim_on and active[u] == nil then active[u] = true end
  if p == FQ_CRITICAL_PRIORITY then
    FQ_CALL('RPUSH', fq_critical_key(q, u), id)
  else
    if pc.score_p ~= p then
      pc.score_p, pc.score_s = p, fq_int(fq_score(p, q.now, q.horizon_ms))
    end
    -- fq_member(seq, id), from the formatted seq: zero-padded to FQ_SEQ_WIDTH digits
    FQ_CALL('ZADD', fq_normal_key(q, u), pc.score_s, FQ_SEQ_PADS[#seq_s] .. seq_s .. id)
  end
  q.ready_delta = q.ready_delta + 1
  q.wake = true
  -- fq_activate returns at once for a tenant known active (fq_is_active's cache)
  if active[u] ~= true then fq_activate(q, u) end
end

-- the task holding unique key `ukey` now, or nil (free, window over, or holder gone)
local function fq_unique_holder(q, ukey, now)
  local hold = FQ_CALL('GET', ukey)
  if not hold then return nil end
  local holder, until_ms = string.match(hold, '^(.*)|(%d+)$')
  if holder == nil then
    if fq_rec(q, hold) == nil then return nil end
    return hold
  end
  if FQ_TONUMBER(until_ms) > now then return holder end
  return nil
end
