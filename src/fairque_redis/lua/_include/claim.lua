--[[ claim helpers: moving due scheduled tasks and the fair choice of a tenant.

  Mirrors the pure Python module fairque_core/domain/fairness.py (pick and serve; activate,
  deactivate, refund and the tenant's pass are in tenant.lua): keep the two in step.
]]
--- @include "task"

-- due scheduled tasks (at most the move limit) into their tenants' queues, ready at due time
local function fq_move_due(q)
  if q.move_limit <= 0 then return end
  local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', fq_int(q.now), 'WITHSCORES',
    'LIMIT', 0, q.move_limit)
  for k = 1, #due, 2 do
    local id = due[k]
    redis.call('ZREM', q.delayed, id)
    local v = redis.call('HMGET', fq_task_key(q, id), 'u', 'p', 'seq')
    -- a damaged hash without its tenant is dropped from `delayed` and left for inspection
    if v[1] ~= false then
      local r = {
        id = id, user = v[1], priority = tonumber(v[2]) or FQ_DEFAULT_PRIORITY,
        seq = tonumber(v[3]) or 0,
      }
      fq_bump(q, r.user, 'scheduled', -1)
      fq_make_ready(q, r, tonumber(due[k + 1]), false)
    end
  end
end

-- the tenant to serve: with no group (nil) the lowest (pass, activation) in the highest active
-- tier; else the best active tenant of the first group that has one, by (-tier, pass,
-- activation)
local function fq_pick(q, groups)
  if groups == nil then
    -- without strict tiers every tenant is in tier 0. With them the top tier is read once per
    -- call and cached in q.top_tier, which fq_activate and fq_deactivate reset when `tiers`
    -- changes
    local top = '0'
    if q.strict_tiers then
      if q.top_tier == nil then
        local tiers = redis.call('ZREVRANGE', q.tiers, 0, 0)
        q.top_tier = tiers[1] or false
      end
      if not q.top_tier then return nil end
      top = q.top_tier
    end
    local first = redis.call('ZRANGE', fq_active_key(q, top), 0, 0)
    if first[1] == nil then return nil end
    return fq_member_tenant(first[1])
  end
  for _, group in ipairs(groups) do
    local best, best_tier, best_pass, best_act = nil, 0, 0, 0
    for _, u in ipairs(group) do
      if fq_is_active(q, u) then
        local t = fq_tenant(q, u)
        local tier = fq_tier(q, t)
        if best == nil or tier > best_tier
          or (tier == best_tier and (t.pass < best_pass
            or (t.pass == best_pass and t.act < best_act))) then
          best, best_tier, best_pass, best_act = u, tier, t.pass, t.act
        end
      end
    end
    if best ~= nil then return best end
  end
  return nil
end

-- pop the next task of tenant u (critical FIFO first), move the virtual time of u's tier to
-- the tier's lowest pass (u's own unless `pinned`: the claim named its tenants), advance the
-- pass, keep u active or not
local function fq_serve(q, u, pinned)
  local t = fq_tenant(q, u)
  local tier = fq_int(fq_tier(q, t))
  local critical = fq_critical_key(q, u)
  local normal = fq_normal_key(q, u)
  local id = redis.call('LPOP', critical)
  local critical_left = true
  if not id then
    critical_left = false -- the critical list is empty: no LLEN below
    local popped = redis.call('ZPOPMIN', normal)
    id = string.sub(popped[1], FQ_SEQ_WIDTH + 1) -- the member without its sequence
  end
  q.ready_delta = q.ready_delta - 1
  local lowest = t.pass
  if pinned then
    lowest = tonumber(redis.call('ZRANGE', fq_active_key(q, tier), 0, 0, 'WITHSCORES')[2])
  end
  fq_set_vtime(q, tier, lowest)
  t.pass = t.pass + t.stride
  t.dirty = true
  if (critical_left and redis.call('LLEN', critical) > 0)
    or redis.call('ZCARD', normal) > 0 then
    fq_place(q, u, t)
  else
    fq_deactivate(q, u)
  end
  return id
end
