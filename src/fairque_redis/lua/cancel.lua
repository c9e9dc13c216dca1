#!lua flags=allow-oom
--[[ cancel: cancel a task that is still alive (InMemoryBackend.cancel).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> children:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id  ARGV[9] '1' = terminate (a started task's process is to end), optional
  Returns: 1 canceled, 0 unknown or already finished, failed or canceled
  A started task's lease ends; its token stays in `tok` (and `ct` = 1 with terminate), so that
  the heartbeat of that lease reports the cancel to its worker (ADR 76).
]]
--- @include "_include/deps"

local q = fq_open(KEYS, ARGV)
local id = ARGV[8]
local r = fq_rec(q, id)
if r == nil or (r.state ~= 'scheduled' and r.state ~= 'deferred' and r.state ~= 'queued'
    and r.state ~= 'started') then
  return 0
end
if r.state == 'queued' then
  fq_remove_ready(q, r)
elseif r.state == 'scheduled' then
  FQ_CALL('ZREM', q.delayed, id)
  fq_bump(q, r.tenant, 'scheduled', -1)
elseif r.state == 'started' then
  FQ_REC.record_attempt(q, r.key, 'canceled', '') -- the task's story (record.lua)
  fq_drop_lease(q, r, nil, nil, true)
  if ARGV[9] == '1' then FQ_CALL('HSET', fq_task_key(q, id), 'ct', '1') end
end
FQ_CALL('HSET', fq_task_key(q, id), 'st', 'canceled', 'rs', 'canceled')
r.state = 'canceled'
fq_bump(q, r.tenant, 'canceled', 1)
fq_event_task(q, 'canceled', id, r.tenant, '', 'canceled')
fq_close_record(q, r)
FQ_DEPS.cancel_dependents(q, r)
fq_close(q)
return 1
