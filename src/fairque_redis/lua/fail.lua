#!lua flags=allow-oom
--[[ fail: record a failed attempt: retry later, or into the DLQ (InMemoryBackend.fail).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> children:<id> and the dependents' keys
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id  ARGV[9] token  ARGV[10] retry delay ms ('' = no retry: DLQ)
  ARGV[11] failure type (failed|expired|poisoned)  ARGV[12] reason
  ARGV[13] the failure record kept with a task that goes to the DLQ (field err; '' = none)
  Told in the event log (_include/events.lua): failed, then retried or (FQ_DEPS.to_dlq)
  dead_lettered.
  Returns: the task's new state ('scheduled' or 'failed'); repeated with the same token while
           the task is still in that state (a lost reply, sent again), that state, no change
  Errors: FQ_E_LEASE_LOST <id>
]]
--- @include "_include/deps"
--- @include "_include/record"

local q = fq_open(KEYS, ARGV)
local id = ARGV[8]
local token = ARGV[9]
local r = fq_rec(q, id)
-- a repeat of this lease's fail (its reply was lost): the state it left, nothing changes
if r ~= nil and (r.state == 'scheduled' or r.state == 'failed') and token ~= '' and r.token == token then
  return r.state
end
if r == nil or r.state ~= 'started' or r.token ~= token then return fq_err('LEASE_LOST', id) end
FQ_REC.record_attempt(q, r.key, ARGV[10] ~= '' and 'retried' or 'failed', ARGV[13]) -- record.lua
fq_drop_lease(q, r, nil, nil, true)
fq_event_task(q, 'failed', id, r.tenant, ARGV[11], ARGV[12])
if ARGV[10] ~= '' then
  local key = fq_task_key(q, id)
  FQ_CALL('HINCRBY', key, 'rc', 1)
  FQ_CALL('HSET', key, 'rs', ARGV[12])
  fq_bump(q, r.tenant, 'retried', 1)
  fq_event_task(q, 'retried', id, r.tenant, ARGV[11], ARGV[12])
  fq_schedule(q, r, q.now + math.max(0, FQ_TONUMBER(ARGV[10])))
else
  if ARGV[13] ~= nil and ARGV[13] ~= '' then
    FQ_CALL('HSET', fq_task_key(q, id), 'err', ARGV[13])
  end
  FQ_DEPS.to_dlq(q, r, ARGV[11], ARGV[12])
end
fq_close(q)
return r.state
