#!lua flags=no-writes
--[[ xcom_get: read XCom values of tasks of one tenant (InMemoryBackend.xcom_get).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> xcom:<tenant>:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] the reader's tenant  ARGV[9] number of items N, then per item: task id, key
  Returns: array of N values, false (nil) for a value that is absent, expired, or of a task of
           another tenant (which reads exactly as absent). Key return_value is the result.
]]
--- @include "_include/core"

local RETURN_VALUE = 'return_value'

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local tenant = ARGV[8]
local n = FQ_TONUMBER(ARGV[9])
local out = {}
for k = 1, n do
  local id, key = ARGV[8 + 2 * k], ARGV[9 + 2 * k]
  local v = FQ_CALL('HMGET', fq_task_key(q, id), 'u', 'exp', 'res')
  local value = false
  if v[1] == tenant and not fq_expired(v[2], q.now) then
    if key == RETURN_VALUE then
      value = v[3]
    else
      value = FQ_CALL('HGET', fq_xcom_key(q, tenant, id), key)
    end
  end
  out[k] = value
end
return out
