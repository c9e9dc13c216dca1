#!lua flags=no-writes
--[[ record_get: read one task's story (get_record; ADR 70, _include/record.lua).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id
  Returns: {} when the task is unknown or expired, else
           {state, tenant, priority, retry count, meta, body, has result (0|1), result,
            reason, failure type, failure record, start ms, end ms, moved ms, attempts,
            kept meta, kept body, body size, progress} ('' when absent; the numbers '0'), then the
            kept attempts' texts, oldest first (the last FQ_REC.attempts of `attempts`)
]]
--- @include "_include/record"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local key = fq_task_key(q, ARGV[8])
local v = FQ_CALL('HMGET', key, 'st', 'u', 'p', 'rc', 'm', 'b', 'res', 'exp', 'rs', 'ft', 'err',
  'sa', 'en', 'mv', 'an', 'km', 'kb', 'bz', 'pg')
if v[1] == false or v[2] == false then return {} end
if fq_expired(v[8], q.now) then return {} end
local out = {v[1], v[2], v[3] or '', v[4] or '0', v[5] or '', v[6] or '', v[7] and 1 or 0,
  v[7] or '', v[9] or '', v[10] or '', v[11] or '', v[12] or '0', v[13] or '0', v[14] or '0',
  v[15] or '0', v[16] or '', v[17] or '', v[18] or '', v[19] or ''}
local n = FQ_TONUMBER(v[15]) or 0
if n > 0 then
  local fields = {}
  for k = math.max(1, n - FQ_REC.attempts + 1), n do fields[#fields + 1] = 'a' .. fq_int(k) end
  local texts = FQ_CALL('HMGET', key, unpack(fields))
  for k = 1, #fields do out[#out + 1] = texts[k] or '' end
end
return out
