--[[ deps: dependents of a task are released when it finishes and canceled when it dies.

  waits:<id> is the set of parents a deferred task still waits for; children:<id> lists the
  tasks that named <id> in depends_on (in push order, duplicates kept, as the model does).
]]
--- @include "task"

-- the helpers of dependencies, in one table (the library's top level is near Lua's local limit)
local FQ_DEPS = {}

function FQ_DEPS.cancel_dependents(q, r)
  local stack = {r.id}
  while #stack > 0 do
    local parent = table.remove(stack)
    local kids = FQ_CALL('LRANGE', fq_children_key(q, parent), 0, -1)
    for _, cid in ipairs(kids) do
      local c = fq_rec(q, cid)
      if c ~= nil and c.state == 'deferred' then
        FQ_CALL('HSET', fq_task_key(q, cid), 'st', 'canceled',
          'rs', 'dependency ' .. parent .. ' did not finish')
        c.state = 'canceled'
        fq_bump(q, c.tenant, 'canceled', 1)
        fq_event_task(q, 'canceled', cid, c.tenant, '', 'dependency ' .. parent .. ' did not finish')
        fq_close_record(q, c)
        table.insert(stack, cid)
      end
    end
  end
end

-- a task whose dependencies are met: ready now, or scheduled for what is left of its delay
function FQ_DEPS.enter(q, r)
  if r.delay_ms > 0 and r.due_ms > q.now then
    fq_schedule(q, r, r.due_ms)
  else
    fq_make_ready(q, r, q.now, false)
  end
end

-- returns how many children the task has (the length of children:<id>)
function FQ_DEPS.release_dependents(q, r)
  local kids = FQ_CALL('LRANGE', fq_children_key(q, r.id), 0, -1)
  for _, cid in ipairs(kids) do
    local c = fq_rec(q, cid)
    if c ~= nil and c.state == 'deferred' then
      local wkey = fq_waits_key(q, cid)
      FQ_CALL('SREM', wkey, r.id)
      if FQ_CALL('SCARD', wkey) == 0 then FQ_DEPS.enter(q, c) end
    end
  end
  return #kids
end

function FQ_DEPS.to_dlq(q, r, ftype, reason)
  FQ_CALL('HSET', fq_task_key(q, r.id), 'st', 'failed', 'ft', ftype, 'rs', reason,
    'mv', fq_int(q.now))
  r.state = 'failed'
  FQ_CALL('ZADD', q.dlq, fq_int(q.now), r.id)
  FQ_REC.ix_add(q, 'failed', r.tenant, r.id) -- the browse indexes (record.lua)
  fq_bump(q, r.tenant, 'dead', 1)
  fq_event_task(q, 'dead_lettered', r.id, r.tenant, ftype, reason)
  fq_ended(q, r)
  FQ_DEPS.cancel_dependents(q, r)
end
