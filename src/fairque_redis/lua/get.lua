#!lua flags=no-writes
--[[ get: read one task (get_message, get_state, get_result).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id
  Returns: {} when the task is unknown or expired, else
           {state, tenant, priority, retry count, meta, body, has result (0|1), result,
            reason, failure type, failure record} (the last three '' when absent)
]]
--- @include "_include/core"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local v = FQ_CALL('HMGET', fq_task_key(q, ARGV[8]), 'st', 'u', 'p', 'rc', 'm', 'b', 'res', 'exp',
  'rs', 'ft', 'err')
if v[1] == false then return {} end
if fq_expired(v[8], q.now) then return {} end
local has = 1
if v[7] == false then
  has = 0
  v[7] = ''
end
return {v[1], v[2], v[3], v[4], v[5], v[6], has, v[7], v[9] or '', v[10] or '', v[11] or ''}
