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

-- a member picked from an active set the first time in this call must be its tenant's own:
-- activation number and tier as in the tenant hash. A tenant hash that is gone is rebuilt
-- from the member (its number, and its score as the pass; weight 1). Any other mismatch (a
-- stale member, a tenant hash of another type) drops the member; a sound tenant with ready
-- work is activated again. Either is counted (`repaired`) and reported (q.repaired).
-- Returns u, or false: pick again
local function fq_check_member(q, u, key, tier, member, score)
  local t = fq_tenant(q, u)
  local act = nil
  if string.byte(member, FQ_SEQ_WIDTH + 1) == FQ_MEMBER_SEP_BYTE then
    act = tonumber(string.sub(member, 1, FQ_SEQ_WIDTH))
  elseif redis.call('ZSCORE', key, member) == false then
    return u -- an old bare member fq_tenant has just rewritten (fq_migrate_member)
  end
  local right_tier = fq_tier_key(q, t) == tier
  if act ~= nil and t.act == act and right_tier and not t.broken then
    t.member, t.member_of = member, act -- fq_place writes it back without formatting it
    return u
  end
  q.repaired[#q.repaired + 1] = u
  fq_bump(q, u, 'repaired', 1)
  if act ~= nil and t.act == nil and not t.broken then
    t.act, t.pass, t.tier = act, tonumber(score), tonumber(tier)
    t.dirty, t.restored = true, true
    q.active_cache[u] = true
    return u
  end
  redis.call('ZREM', key, member)
  if redis.call('ZCARD', key) == 0 then
    redis.call('ZREM', q.tiers, tier)
    q.top_tier = nil
  end
  q.active_cache[u] = nil
  if not t.broken then
    local c = redis.pcall('LLEN', fq_critical_key(q, u))
    local z = redis.pcall('ZCARD', fq_normal_key(q, u))
    if (type(c) == 'number' and c > 0) or (type(z) == 'number' and z > 0) then
      fq_activate(q, u)
    end
  end
  return false
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
    local key = fq_active_key(q, top)
    local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[1] == nil then return nil end
    local u = fq_member_tenant(first[1])
    if q.checked[first[1]] then return u end
    q.checked[first[1]] = true
    return fq_check_member(q, u, key, top, first[1], first[2])
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
-- pass, keep u active or not. Within one call nothing but these pops changes a tenant's
-- queues, so what a serve learnt of them is kept on the tenant record for its next serve in
-- the same call: an empty critical list is not popped again (t.no_critical) and the size of
-- the scored set is counted down instead of read again (t.normal_left)
local function fq_serve(q, u, pinned)
  local t = fq_tenant(q, u)
  local tier = fq_tier_key(q, t)
  if t.critical_key == nil then
    t.critical_key, t.normal_key = fq_critical_key(q, u), fq_normal_key(q, u)
  end
  local critical, normal = t.critical_key, t.normal_key
  -- pcall: a queue of another type (damaged behind the client's back) fails no claim; an
  -- active tenant with neither queue readable or neither holding work is deactivated and
  -- counted (`repaired`), and the claim picks again (nil)
  local id = false
  local critical_left = false
  if not t.no_critical then
    id = redis.pcall('LPOP', critical)
    if type(id) == 'table' then
      if q.checked[critical] == nil then
        q.checked[critical] = true
        q.repaired[#q.repaired + 1] = critical
        fq_bump(q, u, 'repaired', 1)
      end
      id = false
    end
    if id then critical_left = true else t.no_critical = true end
  end
  if not id then
    local popped = redis.pcall('ZPOPMIN', normal)
    if popped['err'] ~= nil or popped[1] == nil then
      if popped['err'] ~= nil and q.checked[normal] == nil then
        q.checked[normal] = true
        q.repaired[#q.repaired + 1] = normal
      end
      q.repaired[#q.repaired + 1] = u
      fq_bump(q, u, 'repaired', 1)
      t.normal_left = nil
      fq_deactivate(q, u)
      return nil
    end
    if t.normal_left ~= nil then t.normal_left = t.normal_left - 1 end
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
  -- work left: the critical list first (read only when this serve popped from it), then the
  -- scored set's size (read once per call, see above)
  local more = false
  if critical_left then
    if redis.call('LLEN', critical) > 0 then more = true else t.no_critical = true end
  end
  if not more then
    if t.normal_left == nil then
      local left = redis.pcall('ZCARD', normal)
      if type(left) == 'table' then
        if q.checked[normal] == nil then
          q.checked[normal] = true
          q.repaired[#q.repaired + 1] = normal
          fq_bump(q, u, 'repaired', 1)
        end
        left = 0
      end
      t.normal_left = left
    end
    more = t.normal_left > 0
  end
  if more then
    fq_place(q, u, t)
  else
    fq_deactivate(q, u)
  end
  return id
end
