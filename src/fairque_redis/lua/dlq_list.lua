#!lua flags=no-writes
--[[ dlq_list: dead-letter entries oldest first, optionally of one failure type (list_dlq).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] limit  ARGV[9] offset  ARGV[10] failure type ('' = any)
  Returns: 11 fields per entry: id, tenant, priority, retry count, meta, body, failure type,
           reason, moved ms, attempts, the kept attempts' texts (record.lua), each as
           `<length>:<text>`, oldest first
]]
--- @include "_include/record"

-- dead-letter ids read per ZRANGE
local PAGE = 256
-- task fields read per entry (the HMGET below): u p rc m b ft rs
local ENTRY_FIELDS = 7

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local limit = FQ_TONUMBER(ARGV[8])
local offset = FQ_TONUMBER(ARGV[9])
local want = ARGV[10]
local out = {}
if limit <= 0 then return out end
local skipped = 0
local taken = 0
local start = 0
if want == '' then
  start = math.max(offset, 0)
  skipped = offset
end
while taken < limit do
  local ids = FQ_CALL('ZRANGE', q.dlq, start, start + PAGE - 1, 'WITHSCORES')
  if #ids == 0 then break end
  start = start + PAGE
  for k = 1, #ids, 2 do
    local v = FQ_CALL('HMGET', fq_task_key(q, ids[k]), 'u', 'p', 'rc', 'm', 'b', 'ft', 'rs')
    if want == '' or v[6] == want then
      if skipped < offset then
        skipped = skipped + 1
      elseif taken < limit then
        taken = taken + 1
        table.insert(out, ids[k])
        for f = 1, ENTRY_FIELDS do table.insert(out, v[f] or '') end
        table.insert(out, ids[k + 1])
        table.insert(out, FQ_REC.record_texts(fq_task_key(q, ids[k]), out)) -- record.lua
      end
    end
  end
end
return out
