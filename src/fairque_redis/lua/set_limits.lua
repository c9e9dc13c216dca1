#!lua flags=allow-oom
--[[ set_limits: change a tenant's own limits, a tier's defaults or the queue's (flow control,
  InMemoryBackend.set_limits, fairque_core/memory/limits.py set_limits and _settle).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t> ts:<t> c:<t> n:<t> active:<tier> parked, task:<id> of current leases
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] scope: 't' tenant, 'tier', 'q' queue  ARGV[9] tenant id or tier ('' for the queue)
  ARGV[10..13] max_running, rate, burst, max_queued: '' unchanged, '-' cleared, else the value
  The first limit ever set marks the current leases `lc` (their ends look at the caps) and
  sets meta `lim`. A tenant's change applies at once: capped, let in, or unparked.
  Each change is told in the event log (limits_changed, _include/events.lua).
  Returns: 1
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV)
local scope, id = ARGV[8], ARGV[9]

-- the stored record with the changes applied
local function merged(stored)
  local parts = {}
  local k = 1
  for part in string.gmatch((stored or '') .. ',', '([^,]*),') do
    parts[k] = part
    k = k + 1
  end
  for f = 1, 4 do
    local change = ARGV[9 + f]
    if change == '-' then
      parts[f] = ''
    elseif change ~= '' then
      parts[f] = change
    end
    parts[f] = parts[f] or ''
  end
  return table.concat(parts, ',', 1, 4)
end

fq_meta(q)
if not q.lim_on then
  for _, lease in ipairs(FQ_CALL('ZRANGE', q.leases, 0, -1)) do
    local key = fq_task_key(q, lease)
    -- (a lease counted under a limit key keeps its scope there, ADR 79)
    if FQ_CALL('EXISTS', key) == 1 and not FQ_CALL('HGET', key, 'lc') then
      FQ_CALL('HSET', key, 'lc', '1')
    end
  end
  FQ_CALL('HSET', q.meta, 'lim', '1')
  q.lim_on = true
end
if scope == 'tier' then
  local record = merged(FQ_CALL('HGET', q.meta, 'lim:' .. id))
  FQ_CALL('HSET', q.meta, 'lim:' .. id, record)
  fq_event(q, 'limits_changed', 'tier', id, 'lim', record)
elseif scope == 'q' then
  q.qlim = merged(q.qlim)
  FQ_CALL('HSET', q.meta, 'lim:q', q.qlim)
  fq_event(q, 'limits_changed', 'lim', q.qlim)
  if fq_limits_decode(q.qlim).rate == nil then
    FQ_CALL('HDEL', q.meta, 'qhold')
    FQ_CALL('ZREM', fq_parked_key(q), FQ_QUEUE_PARK)
  end
else
  local u = id
  local t = fq_tenant(q, u)
  t.lim = merged(t.lim)
  local key = fq_tenant_key(q, u)
  FQ_CALL('HSET', key, 'lim', t.lim)
  fq_event(q, 'limits_changed', 'u', u, 'lim', t.lim)
  -- _settle: bring the tenant's held or active state in line with its new limits
  local lim = fq_limits_of(q, u)
  if lim.rate == nil and t.hold ~= nil then
    t.hold = nil
    FQ_CALL('HDEL', key, 'hold')
    FQ_CALL('ZREM', fq_parked_key(q), u)
  end
  local over = lim.mr ~= nil and fq_limits_running(q, u) >= lim.mr
  if t.capd and not over then
    t.capd = false
    FQ_CALL('HDEL', key, 'capd')
  elseif over and not t.capd then
    t.capd = true
    FQ_CALL('HSET', key, 'capd', '1')
    fq_bump(q, u, 'cap_hits', 1)
    fq_deactivate(q, u)
  end
  if fq_has_ready(q, u) and not fq_is_active(q, u) then fq_activate(q, u) end
  q.resched = true
end
fq_close(q)
return 1
