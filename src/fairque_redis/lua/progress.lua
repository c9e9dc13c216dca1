#!lua flags=allow-oom
--[[ progress: keep a running task's progress and tell the event log (ctx.set_progress;
  EventOps.set_progress of the model; issue 32).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> events
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id  ARGV[9] lease token  ARGV[10] the value (JSON, bounded by the client)
  Returns: 1, or 0 when the lease is not live (nothing changed)
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV, {sched = false})
local id = ARGV[8]
local r = fq_leased(q, id, ARGV[9])
if r == nil then return 0 end
FQ_CALL('HSET', r.key or fq_task_key(q, id), 'pg', ARGV[10])
fq_event(q, 'progress', 'id', id, 'u', r.tenant, 'pg', ARGV[10])
return 1
