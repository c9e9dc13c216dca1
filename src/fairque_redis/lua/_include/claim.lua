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

-- values (deadline, id, ...) per ZADD of the new leases: unpack has a stack limit
local FQ_ZADD_CHUNK = 1000

-- lease up to `count` ready tasks, fairly, on the open queue `q` (claim.lua and the claim part
-- of finish_claim.lua). Its arguments are read from argv from `at` on: worker id, lease ms,
-- count, 1 = groups follow, 0 = all, then (groups) A, A assigned tenant ids, S, S steal
-- tenant ids, then `count` lease tokens (the i-th claimed task gets the i-th token).
-- Returns claim.lua's reply: {now_ms, n, then per claimed task: id, user, priority, retry
-- count, meta, body, recoveries, then the tenants and task keys it repaired}. Raises the wake
-- signal (q.wake) when it claimed and ready tasks remain; fq_close writes everything back
local function fq_claim(q, argv, at)
  -- checked: active-set members checked in this call (fq_pick); repaired: what was
  q.checked, q.repaired = {}, {}
  local worker = argv[at]
  local lease_ms = tonumber(argv[at + 1])
  local count = tonumber(argv[at + 2])
  local groups = nil
  local i = at + 4
  if argv[at + 3] == '1' then
    groups = {}
    for g = 1, 2 do
      local members = {}
      local n = tonumber(argv[i])
      for k = 1, n do members[k] = argv[i + k] end
      i = i + 1 + n
      groups[g] = members
    end
  end
  local tokens_at = i

  fq_move_due(q)
  -- flow control (_include/limits.lua): parked tenants due again, then per start the
  -- queue-wide limits, the tenant's rate and cap
  local limited = fq_limits_on(q)
  if limited then fq_unpark_due(q) end
  -- a paused queue (pause.lua; meta `pau`, read with the meta fields) leases nothing
  if q.paused then count = 0 end
  local out = {q.now, 0}
  local deadline = fq_int(q.now + lease_ms)
  local lease_flag = limited and '1' or '0'
  local n = 0
  local leases = {} -- deadline, id, ...: one ZADD for the batch below
  -- lease task `id` of tenant u (served from its queue); false when its key is of another
  -- type (damaged behind the client's back): nothing to lease, the id has left the queue,
  -- counted
  local function lease(u, id, token)
    local key = fq_task_key(q, id)
    -- cdl: the claim's deadline; a lease that expires still at it never started (refund)
    -- lc: a lease of a queue with limits (its end looks at the tenant's cap)
    local set = redis.pcall('HSET', key, 'st', 'started', 'tok', token, 'wk', worker,
      'dl', deadline, 'cdl', deadline, 'lc', lease_flag)
    if type(set) == 'table' then
      q.repaired[#q.repaired + 1] = key
      fq_bump(q, u, 'repaired', 1)
      return false
    end
    n = n + 1
    leases[2 * n - 1] = deadline
    leases[2 * n] = id
    fq_bump(q, u, 'leased', 1)
    fq_bump(q, u, 'claimed', 1)
    if limited then
      fq_limits_after_start(q, u)
      fq_queue_started(q)
    end
    local v = redis.call('HMGET', key, 'p', 'rc', 'm', 'b', 'rec')
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, u, v[1], v[2]
    out[o + 5], out[o + 6], out[o + 7] = v[3], v[4], v[5]
    return true
  end

  while n < count do
    if limited and not fq_queue_may_start(q, n) then break end
    local u = fq_pick(q, groups)
    if u == nil then break end
    -- false: a damaged member was dropped; a nil id: a damaged tenant was deactivated. Either
    -- way the loop picks again (each repair removes what was picked)
    local id = u and fq_serve(q, u, groups ~= nil)
    if id then lease(u, id, argv[tokens_at + n]) end
  end
  out[2] = n
  for _, what in ipairs(q.repaired) do table.insert(out, what) end
  for s = 1, #leases, FQ_ZADD_CHUNK do
    redis.call('ZADD', q.leases, unpack(leases, s, math.min(s + FQ_ZADD_CHUNK - 1, #leases)))
  end
  -- ready work left behind: pass the wake signal on to the next idle worker
  if n > 0 then
    fq_meta(q)
    if q.ready_base + q.ready_delta > 0 then q.wake = true end
  end
  return out
end
