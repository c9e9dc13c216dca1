#!lua flags=allow-oom
--[[ claim: lease up to `count` ready tasks, fairly (InMemoryBackend.claim).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] worker id  ARGV[9] lease ms  ARGV[10] count  ARGV[11] 1 = groups follow, 0 = all
  then (groups) A, A assigned tenant ids, S, S steal tenant ids
  then `count` lease tokens (the i-th claimed task gets the i-th token)
  Raises the wake signal when it claimed and ready tasks remain (or it moved due ones).
  Returns: {now_ms, n, then per claimed task: id, user, priority, retry count, meta, body,
           recoveries, then the tenants and task keys it repaired}
  A tenant whose structures were damaged behind the client's back (a queue deleted or of
  another type, its hash gone or of another type, a stale active-set member) is repaired or
  deactivated and skipped, a task key of another type is dropped, each counted as `repaired`
  (stats) and named after the claimed tasks: one damaged tenant never stops the others.
]]
--- @include "_include/claim"

-- values (deadline, id, ...) per ZADD of the new leases: unpack has a stack limit
local ZADD_CHUNK = 1000

local q = fq_open(KEYS, ARGV, {meta = true}) -- reads meta anyway (q.paused): its type check
-- checked: active-set members checked in this call (claim.lua include); repaired: what was
q.checked, q.repaired = {}, {}
local worker = ARGV[8]
local lease_ms = tonumber(ARGV[9])
local count = tonumber(ARGV[10])
local groups = nil
local i = 12
if ARGV[11] == '1' then
  groups = {}
  for g = 1, 2 do
    local members = {}
    local n = tonumber(ARGV[i])
    for k = 1, n do members[k] = ARGV[i + k] end
    i = i + 1 + n
    groups[g] = members
  end
end
local tokens_at = i

fq_move_due(q)
-- flow control (_include/limits.lua): parked tenants due again, then per start the queue-wide
-- limits, the tenant's rate and cap
local limited = fq_limits_on(q)
if limited then fq_unpark_due(q) end
-- a paused queue (pause.lua; meta `pau`, read with the meta fields) leases nothing
if q.paused then count = 0 end
local out = {q.now, 0}
local deadline = fq_int(q.now + lease_ms)
local lease_flag = limited and '1' or '0'
local n = 0
local leases = {} -- deadline, id, ...: one ZADD for the batch below
-- lease task `id` of tenant u (served from its queue); false when its key is of another type
-- (damaged behind the client's back): nothing to lease, the id has left the queue, counted
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
  if id then lease(u, id, ARGV[tokens_at + n]) end
end
out[2] = n
for _, what in ipairs(q.repaired) do table.insert(out, what) end
for s = 1, #leases, ZADD_CHUNK do
  redis.call('ZADD', q.leases, unpack(leases, s, math.min(s + ZADD_CHUNK - 1, #leases)))
end
-- ready work left behind: pass the wake signal on to the next idle worker
if n > 0 then
  fq_meta(q)
  if q.ready_base + q.ready_delta > 0 then q.wake = true end
end
fq_close(q)
return out
