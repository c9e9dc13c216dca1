--[[ tenant: pass/stride/tier of a tenant and its membership of the active sets.

  Mirrors the pure Python module fairque_core/domain/fairness.py (activate, deactivate, the
  pass and virtual time; pick and serve are in claim.lua): keep the two in step.

  A tenant is active while it has ready work; active:<tier> holds it scored by its pass, and
  `tiers` holds every tier with an active tenant. In non-strict mode every tenant is tier 0.
]]
--- @include "core"

-- scoring.STRIDE_SCALE: the stride of weight 1
local FQ_DEFAULT_STRIDE = 1000000

local function fq_tenant(q, u)
  local t = q.tenant_cache[u]
  if t == nil then
    local v = redis.call('HMGET', fq_tenant_key(q, u), 'pass', 'stride', 'tier')
    t = {
      pass = tonumber(v[1]) or 0,
      stride = tonumber(v[2]) or FQ_DEFAULT_STRIDE,
      tier = tonumber(v[3]) or 0,
      dirty = false,
    }
    q.tenant_cache[u] = t
  end
  return t
end

local function fq_tier(q, t)
  if q.strict_tiers then return t.tier end
  return 0
end

local function fq_is_active(q, u)
  local cached = q.active_cache[u]
  if cached ~= nil then return cached end
  local tier = 0
  if q.strict_tiers then tier = fq_tenant(q, u).tier end
  local on = redis.call('ZSCORE', fq_active_key(q, fq_int(tier)), u) ~= false
  q.active_cache[u] = on
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
  redis.call('ZADD', fq_active_key(q, tier), fq_int(t.pass), u)
  redis.call('ZADD', q.tiers, tier, tier)
  q.top_tier = nil
  q.active_cache[u] = true
end

local function fq_deactivate(q, u)
  local t = fq_tenant(q, u)
  local tier = fq_int(fq_tier(q, t))
  local key = fq_active_key(q, tier)
  redis.call('ZREM', key, u)
  if redis.call('ZCARD', key) == 0 then
    redis.call('ZREM', q.tiers, tier)
    q.top_tier = nil
  end
  q.active_cache[u] = false
end

local function fq_has_ready(q, u)
  return redis.call('LLEN', fq_critical_key(q, u)) > 0
    or redis.call('ZCARD', fq_normal_key(q, u)) > 0
end
