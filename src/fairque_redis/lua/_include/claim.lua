--[[ claim helpers: moving due scheduled tasks and the fair choice of a tenant. ]]
--- @include "task"

-- due scheduled tasks (at most the move limit) into their tenants' queues, ready at due time
local function fq_move_due(q)
  if q.move_limit <= 0 then return end
  local due = redis.call('ZRANGEBYSCORE', q.delayed, '-inf', fq_int(q.now), 'WITHSCORES',
    'LIMIT', 0, q.move_limit)
  for k = 1, #due, 2 do
    local id = due[k]
    redis.call('ZREM', q.delayed, id)
    local v = redis.call('HMGET', q.p .. 'task:' .. id, 'u', 'p', 'seq')
    -- a damaged hash without its tenant is dropped from `delayed` and left for inspection
    if v[1] ~= false then
      local r = {id = id, u = v[1], p = tonumber(v[2]) or 3, seq = tonumber(v[3]) or 0}
      fq_bump(q, r.u, 'scheduled', -1)
      fq_make_ready(q, r, tonumber(due[k + 1]), false)
    end
  end
end

-- byte order of two strings (Lua's `<` uses strcoll, which follows the server's locale)
local function fq_bytes_less(a, b)
  local n = math.min(#a, #b)
  for k = 1, n do
    local x, y = string.byte(a, k), string.byte(b, k)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- the tenant to serve: with no group (nil) the lowest pass in the highest active tier; else
-- the best active tenant of the first group that has one, by (-tier, pass, tenant id)
local function fq_pick(q, groups)
  if groups == nil then
    -- without strict tiers every tenant is in tier 0. With them the top tier is read once per
    -- call and cached in q.top, which fq_activate and fq_deactivate reset when `tiers` changes
    local top = '0'
    if q.strict then
      if q.top == nil then
        local tiers = redis.call('ZREVRANGE', q.tiers, 0, 0)
        q.top = tiers[1] or false
      end
      if not q.top then return nil end
      top = q.top
    end
    local first = redis.call('ZRANGE', q.p .. 'active:' .. top, 0, 0)
    return first[1]
  end
  for _, group in ipairs(groups) do
    local best, best_tier, best_pass = nil, 0, 0
    for _, u in ipairs(group) do
      if fq_is_active(q, u) then
        local t = fq_tenant(q, u)
        local tier = fq_tier(q, t)
        if best == nil or tier > best_tier
          or (tier == best_tier and (t.pass < best_pass or (t.pass == best_pass and fq_bytes_less(u, best)))) then
          best, best_tier, best_pass = u, tier, t.pass
        end
      end
    end
    if best ~= nil then return best end
  end
  return nil
end

-- pop the next task of tenant u (critical FIFO first), advance the pass, keep u active or not
local function fq_serve(q, u)
  local t = fq_tenant(q, u)
  local id = redis.call('LPOP', q.p .. 'c:' .. u)
  local critical_left = true
  if not id then
    critical_left = false -- the critical list is empty: no LLEN below
    local popped = redis.call('ZPOPMIN', q.p .. 'n:' .. u)
    id = string.sub(popped[1], 17)
  end
  q.ready = q.ready - 1
  fq_set_vtime(q, t.pass)
  t.pass = t.pass + t.stride
  t.dirty = true
  if (critical_left and redis.call('LLEN', q.p .. 'c:' .. u) > 0)
    or redis.call('ZCARD', q.p .. 'n:' .. u) > 0 then
    redis.call('ZADD', q.p .. 'active:' .. fq_int(fq_tier(q, t)), fq_int(t.pass), u)
  else
    fq_deactivate(q, u)
  end
  return id
end
