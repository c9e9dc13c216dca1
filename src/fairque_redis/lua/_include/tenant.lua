--[[ tenant: pass/stride/tier of a tenant and its membership of the active sets.

  A tenant is active while it has ready work; active:<tier> holds it scored by its pass, and
  `tiers` holds every tier with an active tenant. In non-strict mode every tenant is tier 0.
]]
--- @include "core"

local FQ_DEFAULT_STRIDE = 1000000

local function fq_tenant(q, u)
  local t = q.tn[u]
  if t == nil then
    local v = redis.call('HMGET', q.p .. 'tenant:' .. u, 'pass', 'stride', 'tier')
    t = {
      pass = tonumber(v[1]) or 0,
      stride = tonumber(v[2]) or FQ_DEFAULT_STRIDE,
      tier = tonumber(v[3]) or 0,
      dirty = false,
    }
    q.tn[u] = t
  end
  return t
end

local function fq_tier(q, t)
  if q.strict then return t.tier end
  return 0
end

local function fq_is_active(q, u)
  local cached = q.act[u]
  if cached ~= nil then return cached end
  local tier = 0
  if q.strict then tier = fq_tenant(q, u).tier end
  local on = redis.call('ZSCORE', q.p .. 'active:' .. fq_int(tier), u) ~= false
  q.act[u] = on
  return on
end

local function fq_activate(q, u)
  if fq_is_active(q, u) then return end
  local t = fq_tenant(q, u)
  local vt = fq_vtime(q)
  if vt > t.pass then
    t.pass = vt
    t.dirty = true
  end
  local tier = fq_int(fq_tier(q, t))
  redis.call('ZADD', q.p .. 'active:' .. tier, fq_int(t.pass), u)
  redis.call('ZADD', q.tiers, tier, tier)
  q.top = nil
  q.act[u] = true
end

local function fq_deactivate(q, u)
  local t = fq_tenant(q, u)
  local tier = fq_int(fq_tier(q, t))
  local key = q.p .. 'active:' .. tier
  redis.call('ZREM', key, u)
  if redis.call('ZCARD', key) == 0 then
    redis.call('ZREM', q.tiers, tier)
    q.top = nil
  end
  q.act[u] = false
end

local function fq_has_ready(q, u)
  return redis.call('LLEN', q.p .. 'c:' .. u) > 0 or redis.call('ZCARD', q.p .. 'n:' .. u) > 0
end
