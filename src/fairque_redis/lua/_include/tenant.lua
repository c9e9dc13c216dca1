--[[ tenant: pass/stride/tier of a tenant and its membership of the active sets.

  Mirrors the pure Python module fairque_core/domain/fairness.py (activate, deactivate,
  refund, the pass and the virtual times; pick and serve are in claim.lua, the weight change in
  set_weight.lua): keep the two in step.

  A tenant is active while it has ready work; active:<tier> holds it scored by its pass, and
  `tiers` holds every tier with an active tenant. In non-strict mode every tenant is tier 0.
  The member is the tenant's activation number (16 digits, the queue's `act` sequence), `|`,
  then the tenant id, so equal passes go to the tenant activated first. `|` is outside the id
  grammar: a member without it is a bare tenant id written before activation order existed,
  rewritten in the new form the first time a script reads that tenant (fq_tenant).
]]
--- @include "core"

-- scoring.STRIDE_SCALE: the stride of weight 1
local FQ_DEFAULT_STRIDE = 1000000
-- the byte between a member's activation number and the tenant id
local FQ_MEMBER_SEP = '|'
local FQ_MEMBER_SEP_BYTE = string.byte(FQ_MEMBER_SEP)

local function fq_tier(q, t)
  if q.strict_tiers then return t.tier end
  return 0
end

-- fq_tier as the string keys and meta fields use ('0' without strict tiers: no formatting)
local function fq_tier_key(q, t)
  if q.strict_tiers then return fq_int(t.tier) end
  return '0'
end

-- the member of tenant u (activation number act) in its active set
local function fq_active_member(u, act)
  return FQ_FORMAT(FQ_SEQ_FORMAT, act) .. FQ_MEMBER_SEP .. u
end

-- the tenant id of an active-set member (a bare id is an old member)
local function fq_member_tenant(member)
  if string.byte(member, FQ_SEQ_WIDTH + 1) == FQ_MEMBER_SEP_BYTE then
    return FQ_SUB(member, FQ_SEQ_WIDTH + 2)
  end
  return member
end

-- a tenant record without an activation number: if its bare id is in its active set (written
-- before activation order existed), give it the next number and rewrite the member
local function fq_migrate_member(q, u, t)
  if q.av ~= nil then q.av.drop(q) end -- a claim's view of an active set (claim.lua)
  local key = fq_active_key(q, fq_tier_key(q, t))
  local score = FQ_CALL('ZSCORE', key, u)
  if score == false then
    q.active_cache[u] = false
    return
  end
  FQ_CALL('ZREM', key, u)
  t.act = fq_next_act(q)
  t.dirty = true
  FQ_CALL('ZADD', key, score, fq_active_member(u, t.act))
  q.active_cache[u] = true
end

local function fq_tenant(q, u)
  local cache = q.tenant_cache
  if cache == nil then
    cache = {}
    q.tenant_cache = cache
  end
  local t = cache[u]
  if t == nil then
    local key = fq_tenant_key(q, u)
    if q.lean_tenants then
      -- a claim that uses neither flow control nor strict tiers (claim.lua) reads what it
      -- uses: the pass, stride, activation number and pause flag (the tier reads as 0 there,
      -- and no limit field was ever written: meta `lim` is set before any)
      local v = FQ_PCALL('HMGET', key, 'pass', 'stride', 'act', 'pau')
      local broken = v['err'] ~= nil
      if broken then v = {} end
      local act = FQ_TONUMBER(v[3])
      -- the nil fields are what the claim learns of the tenant (claim.lua): named here, the
      -- record is made with room for them (a Lua table sized by its constructor's fields),
      -- no rehash when they are set
      t = {
        key = key, pass = FQ_TONUMBER(v[1]) or 0, stride = FQ_TONUMBER(v[2]) or FQ_DEFAULT_STRIDE,
        act = act, act_read = act, paused = v[4] == '1' or nil, broken = broken or nil,
        member = nil, member_of = nil, normal_key = nil, normal_left = nil, no_critical = nil,
        dirty = nil, pend_n = nil,
      }
    else
      local v = FQ_PCALL('HMGET', key, 'pass', 'stride', 'tier', 'act',
        'lim', 'tat', 'hold', 'capd', 'pau')
      -- a tenant hash of another type (damaged behind the client's back) reads as a fresh
      -- tenant marked broken: never written back; the claim deactivates it (claim.lua)
      local broken = v['err'] ~= nil
      if broken then v = {} end
      -- lim/tat/hold/capd: flow control (limits.lua): own limits, GCRA tat (us), no start
      -- before `hold` (ms), capped. The flags (capd, paused, broken; dirty, set by a change)
      -- are nil rather than false (every reader tests them for truth): a nil takes no slot
      -- of the record, which a claim fills with what it learns (claim.lua) without a rehash.
      -- act_read: the activation number as read (fq_close writes `act` only when it changed)
      local act = FQ_TONUMBER(v[4])
      t = {
        key = key, -- kept for fq_close's write
        pass = FQ_TONUMBER(v[1]) or 0,
        stride = FQ_TONUMBER(v[2]) or FQ_DEFAULT_STRIDE,
        tier = FQ_TONUMBER(v[3]) or 0,
        act = act, act_read = act,
        lim = v[5] or '', tat = FQ_TONUMBER(v[6]) or 0, hold = FQ_TONUMBER(v[7]),
        capd = v[8] == '1' or nil,
        paused = v[9] == '1' or nil, -- pause.lua: held out of its active set as capped
        broken = broken or nil,
      }
    end
    cache[u] = t
    if t.act == nil then fq_migrate_member(q, u, t) end
  end
  return t
end

local function fq_is_active(q, u)
  local cached = q.active_cache[u]
  if cached ~= nil then return cached end
  local t = fq_tenant(q, u)
  cached = q.active_cache[u]
  if cached ~= nil then return cached end
  local on = t.act ~= nil and FQ_CALL('ZSCORE', fq_active_key(q, fq_tier_key(q, t)),
    fq_active_member(u, t.act)) ~= false
  q.active_cache[u] = on
  return on
end

-- (re)score active tenant u at its pass (its member string kept for the call: t.member_of).
-- While a claim holds a view of u's active set (q.av, claim.lua), a tenant of the view is
-- rescored in the view only (written back once per call), any other write drops the view
local function fq_place(q, u, t)
  local key = fq_active_key(q, fq_tier_key(q, t))
  if q.av ~= nil and q.av.place(q, u, t, key) then return end
  if t.member_of ~= t.act then
    t.member, t.member_of = fq_active_member(u, t.act), t.act
  end
  FQ_CALL('ZADD', key, fq_int(t.pass), t.member)
end

-- a tenant with ready work joins its active set (a newcomer's entry), unless a limit holds
-- it (limits.admit): capped, it waits for a lease to end; throttled, it is parked by time;
-- paused (pause.lua), it waits for its resume
local function fq_activate(q, u)
  if fq_is_active(q, u) then return end
  local t = fq_tenant(q, u)
  if t.capd or t.paused then return end
  if t.hold ~= nil and t.hold > q.now then
    if FQ_CALL('ZADD', fq_parked_key(q), 'NX', fq_int(t.hold), u) == 1 then
      q.resched = true
    end
    return
  end
  local tier = fq_tier_key(q, t)
  local vt = fq_vtime(q, tier)
  if vt > t.pass then t.pass = vt end
  t.act = fq_next_act(q)
  t.dirty = true
  fq_place(q, u, t)
  FQ_CALL('ZADD', q.tiers, tier, tier)
  q.top_tier = nil
  q.active_cache[u] = true
end

local function fq_deactivate(q, u)
  local t = fq_tenant(q, u)
  local tier = fq_tier_key(q, t)
  local key = fq_active_key(q, tier)
  if t.act ~= nil then
    if q.av ~= nil then q.av.forget(q, u, t, key) end -- it leaves a claim's view too
    FQ_CALL('ZREM', key, fq_active_member(u, t.act))
  end
  if FQ_CALL('ZCARD', key) == 0 then
    FQ_CALL('ZREM', q.tiers, tier)
    q.top_tier = nil
  end
  q.active_cache[u] = false
end

-- a claim of u that never started gives its turn back: one stride, never below the virtual
-- time of u's tier (FairState.refund; before the task is made ready again)
local function fq_refund(q, u)
  local t = fq_tenant(q, u)
  local floor = fq_vtime(q, fq_tier_key(q, t))
  t.pass = math.max(t.pass - t.stride, floor)
  t.dirty = true
  if fq_is_active(q, u) then fq_place(q, u, t) end
end

local function fq_has_ready(q, u)
  return FQ_CALL('LLEN', fq_critical_key(q, u)) > 0
    or FQ_CALL('ZCARD', fq_normal_key(q, u)) > 0
end
