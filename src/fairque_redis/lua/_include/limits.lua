--[[ limits: flow control per tenant and per queue (ADR 28): concurrency caps, rate limits
  (GCRA on the script's clock), queue caps.

  Mirrors fairque_core/domain/limits.py and fairque_core/memory/limits.py step for step: keep
  them in step. A limit record is `max_running,rate,burst,max_queued` (an empty part: none):
  a tenant's own in its hash (`lim`), a tier's default in meta `lim:<tier>`, the queue's in
  meta `lim:q`. meta `lim` = 1 once any limit was set: until then every step here is skipped
  (fq_limits_on), and a claim marks its lease `lc` = 1 once it is set, so that only those
  leases' ends look at the tenant (fq_limits_lease_ended, from fq_drop_lease).
  Tenant hash: `tat` GCRA theoretical arrival time (us), `hold` no start before (ms), `capd` 1
  while capped. meta: `qtat`, `qhold` the same for the queue-wide rate. `parked` zset: held
  tenants with ready work (and `|queue`) by the time they may start; the claim moves the due
  ones back (fq_unpark_due) and next_due.lua wakes idle workers at the first.
]]
--- @include "tenant"
--- @include "keylimits"

local FQ_QUEUE_PARK = '|queue'

local function fq_limits_on(q)
  fq_meta(q)
  return q.lim_on
end

-- a stored record -> {mr, rate, burst, mq} (nil parts: no limit)
local function fq_limits_decode(s)
  local out = {}
  local k = 1
  for part in string.gmatch((s or '') .. ',', '([^,]*),') do
    out[k] = FQ_TONUMBER(part)
    k = k + 1
  end
  return {mr = out[1], rate = out[2], burst = out[3], mq = out[4]}
end

-- u's limits in force: its own, else its tier's default, field by field (limits.effective)
local function fq_limits_of(q, u)
  local t = fq_tenant(q, u)
  local own = fq_limits_decode(t.lim)
  q.tier_lims = q.tier_lims or {}
  local tier = fq_int(t.tier)
  local def = q.tier_lims[tier]
  if def == nil then
    def = fq_limits_decode(FQ_CALL('HGET', q.meta, 'lim:' .. tier) or '')
    q.tier_lims[tier] = def
  end
  return {
    mr = own.mr or def.mr, rate = own.rate or def.rate,
    burst = own.burst or def.burst, mq = own.mq or def.mq,
  }
end

-- u's leases now: the stored gauge plus this call's change
local function fq_limits_running(q, u)
  local base = FQ_TONUMBER(FQ_CALL('HGET', fq_tenant_stats_key(q, u), 'leased') or '0')
  local delta = q.tenant_counters[u]
  return base + ((delta and delta.leased) or 0)
end

-- the GCRA step (limits.gcra_start): new tat and the first time (us) of the next start
local function fq_gcra(tat, now_us, rate, burst)
  local step = math.max(1, FQ_FLOOR(1000000 / rate + 0.5))
  local tol = (math.max(1, burst or 1) - 1) * step
  tat = math.max(tat, now_us) + step
  return tat, tat - tol
end

local function fq_ceil_ms(us)
  return math.ceil(us / 1000)
end

-- u just had a task claimed, its lease counted (limits.after_start)
local function fq_limits_after_start(q, u)
  local t = fq_tenant(q, u)
  local lim = fq_limits_of(q, u)
  local now_us = q.now * 1000
  local key = fq_tenant_key(q, u)
  if lim.rate ~= nil then
    local next_us
    t.tat, next_us = fq_gcra(t.tat, now_us, lim.rate, lim.burst)
    FQ_CALL('HSET', key, 'tat', fq_int(t.tat))
    if next_us > now_us then
      t.hold = fq_ceil_ms(next_us)
      FQ_CALL('HSET', key, 'hold', fq_int(t.hold))
      fq_bump(q, u, 'throttles', 1)
    end
  end
  if lim.mr ~= nil and not t.capd and fq_limits_running(q, u) >= lim.mr then
    t.capd = true
    FQ_CALL('HSET', key, 'capd', '1')
    fq_bump(q, u, 'cap_hits', 1)
  end
  local held = t.capd or (t.hold ~= nil and t.hold > q.now)
  if held and fq_is_active(q, u) then
    fq_deactivate(q, u)
    fq_activate(q, u) -- parks it when only its rate holds it
  end
end

-- a lease of u ended, its gauge already lowered (limits.lease_ended)
local function fq_limits_lease_ended(q, u)
  local t = fq_tenant(q, u)
  if t.capd then
    local cap = fq_limits_of(q, u).mr
    if cap == nil or fq_limits_running(q, u) < cap then
      t.capd = false
      FQ_CALL('HDEL', fq_tenant_key(q, u), 'capd')
      if fq_has_ready(q, u) then
        fq_activate(q, u)
        q.wake = true
      end
    end
  end
  fq_meta(q)
  if fq_limits_decode(q.qlim).mr ~= nil then q.wake = true end
end

-- whether the queue-wide limits allow one more start; `n` leases were made in this call and
-- are not in `leases` yet (limits.queue_may_start)
local function fq_queue_may_start(q, n)
  local cap = fq_limits_decode(q.qlim).mr
  if cap ~= nil then
    if q.lease_base == nil then q.lease_base = FQ_CALL('ZCARD', q.leases) end
    if q.lease_base + n >= cap then return false end
  end
  return q.qhold <= q.now
end

-- a start under the queue-wide rate (limits.queue_started)
local function fq_queue_started(q)
  local lim = fq_limits_decode(q.qlim)
  if lim.rate == nil then return end
  local now_us = q.now * 1000
  local next_us
  q.qtat, next_us = fq_gcra(q.qtat, now_us, lim.rate, lim.burst)
  local fields = {'qtat', fq_int(q.qtat)}
  if next_us > now_us then
    q.qhold = fq_ceil_ms(next_us)
    fields[3] = 'qhold'
    fields[4] = fq_int(q.qhold)
    FQ_CALL('ZADD', fq_parked_key(q), fq_int(q.qhold), FQ_QUEUE_PARK)
    q.resched = true
  end
  FQ_CALL('HSET', q.meta, unpack(fields))
end

-- the claim's due-move step for parked members (limits.unpark_due)
local function fq_unpark_due(q)
  local parked = fq_parked_key(q)
  local due = FQ_CALL('ZRANGEBYSCORE', parked, '-inf', fq_int(q.now), 'LIMIT', 0,
    q.move_limit or fq_header(q, 'move_limit'))
  for _, member in ipairs(due) do
    FQ_CALL('ZREM', parked, member)
    if FQ_SUB(member, 1, 3) == '|k|' then -- a limit key's scope (ADR 79)
      FQ_KEYLIM.settle(q, FQ_SUB(member, 4))
    elseif member ~= FQ_QUEUE_PARK then
      local t = fq_tenant(q, member)
      t.hold = nil
      FQ_CALL('HDEL', fq_tenant_key(q, member), 'hold')
      if fq_has_ready(q, member) then fq_activate(q, member) end
    end
  end
end

-- u's max_queued when `adding` more tasks would take u past it, the refusal counted (push's
-- refusal, and the intake's at ingest); nil when they fit or u has no cap. u's ready and
-- scheduled tasks count, this call's change to its scheduled gauge included. A key of another
-- type counts as empty (read with pcall: an ingest must not fail half-way; the type checks
-- that refuse a damaged key are the caller's)
local function fq_limits_over_cap(q, u, adding)
  local cap = fq_limits_of(q, u).mq
  if cap == nil then return nil end
  local stats = fq_tenant_stats_key(q, u)
  local delta = q.tenant_counters[u]
  local c = FQ_PCALL('LLEN', fq_critical_key(q, u))
  local z = FQ_PCALL('ZCARD', fq_normal_key(q, u))
  local queued = (FQ_TYPE(c) == 'number' and c or 0) + (FQ_TYPE(z) == 'number' and z or 0)
    + (FQ_TONUMBER(FQ_PCALL('HGET', stats, 'scheduled')) or 0)
    + ((delta and delta.scheduled) or 0)
  if queued + adding <= cap then return nil end
  FQ_PCALL('HINCRBY', stats, 'refusals', 1)
  FQ_CALL('HINCRBY', q.stats, 'refusals', 1)
  return cap
end

-- max_queued: nil, or the error reply refusing the whole push (limits.check_push). at[k] is
-- where message k starts in argv (id, then tenant)
local function fq_limits_check_push(q, argv, at, n)
  if not fq_limits_on(q) then return nil end
  local adding, order, seen = {}, {}, {}
  for k = 1, n do
    local id, u = argv[at[k]], argv[at[k] + 1]
    local v = FQ_CALL('HMGET', fq_task_key(q, id), 'st', 'exp')
    local live = v[1] ~= false and not fq_expired(v[2], q.now)
    if not seen[id] and not live then
      seen[id] = true
      if adding[u] == nil then
        adding[u] = 0
        table.insert(order, u)
      end
      adding[u] = adding[u] + 1
    end
  end
  for _, u in ipairs(order) do
    local cap = fq_limits_over_cap(q, u, adding[u])
    if cap ~= nil then return fq_err('QUEUE_FULL', fq_int(cap) .. ' ' .. u) end
  end
  return nil
end
