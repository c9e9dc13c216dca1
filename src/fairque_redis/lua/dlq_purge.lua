#!lua flags=allow-oom
--[[ dlq_purge: delete dead-letter entries and their tasks for good (purge_dlq).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> waits:<id> children:<id> done:<id> xcom:<tenant>:<id> (fq_forget)
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] 1 = every entry, 0 = the N ids that follow: ARGV[9] N, ids
  Returns: how many entries were purged
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV)
local ids
if ARGV[8] == '1' then
  ids = FQ_CALL('ZRANGE', q.dlq, 0, -1)
else
  ids = {}
  for k = 1, FQ_TONUMBER(ARGV[9]) do ids[k] = ARGV[9 + k] end
end
local n = 0
for _, id in ipairs(ids) do
  if FQ_CALL('ZREM', q.dlq, id) == 1 then
    n = n + 1
    FQ_REC.ix_drop(q, 'failed', FQ_PCALL('HGET', fq_task_key(q, id), 'u'), id) -- record.lua
    fq_forget(q, id)
  end
end
return n
