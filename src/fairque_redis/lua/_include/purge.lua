--[[ purge: an operator removes waiting work in one step (purge_tenant.lua, purge_all.lua;
  fairque_core/memory/purge.py is the model).

  A purged task is canceled as `cancel` cancels it (state canceled, reason 'purged', counted in
  `canceled`, kept for the result TTL, waiting dependents canceled), so every counter still
  adds up. Only queued and scheduled tasks are purged: a leased task runs to its end (finish,
  fail or the reaper), a deferred one waits for its parents (canceled with a purged parent).
]]
--- @include "deps"

local FQ_PURGE = {}
-- purge the queued or scheduled task `id`; 1 when purged, 0 otherwise
function FQ_PURGE.task(q, id)
  local r = fq_rec(q, id)
  if r == nil then return 0 end
  if r.state == 'queued' then
    fq_remove_ready(q, r)
  elseif r.state == 'scheduled' then
    FQ_CALL('ZREM', q.delayed, id)
    fq_bump(q, r.tenant, 'scheduled', -1)
  else
    return 0
  end
  FQ_CALL('HSET', fq_task_key(q, id), 'st', 'canceled', 'rs', 'purged')
  r.state = 'canceled'
  fq_bump(q, r.tenant, 'canceled', 1)
  fq_event_task(q, 'canceled', id, r.tenant, '', 'purged')
  fq_close_record(q, r)
  FQ_DEPS.cancel_dependents(q, r)
  return 1
end

-- purge tenant u's ready tasks (critical FIFO, then scored set); returns how many
function FQ_PURGE.ready(q, u)
  local n = 0
  for _, id in ipairs(FQ_CALL('LRANGE', fq_critical_key(q, u), 0, -1)) do
    n = n + FQ_PURGE.task(q, id)
  end
  for _, member in ipairs(FQ_CALL('ZRANGE', fq_normal_key(q, u), 0, -1)) do
    n = n + FQ_PURGE.task(q, FQ_SUB(member, FQ_SEQ_WIDTH + 1))
  end
  return n
end

-- purge the scheduled tasks of tenant u (of every tenant when u is nil); returns how many
function FQ_PURGE.scheduled(q, u)
  local n = 0
  for _, id in ipairs(FQ_CALL('ZRANGE', q.delayed, 0, -1)) do
    if u == nil or FQ_CALL('HGET', fq_task_key(q, id), 'u') == u then
      n = n + FQ_PURGE.task(q, id)
    end
  end
  return n
end
