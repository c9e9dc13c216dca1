#!lua flags=allow-oom
--[[ dlq_requeue: dead-letter entries back into their tenants' queues, retry count and
  recoveries reset (requeue_dlq).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] 1 = every entry (oldest first), 0 = the N ids that follow: ARGV[9] N, ids
  Returns: how many entries were requeued
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
  local key = fq_task_key(q, id)
  local v = FQ_CALL('HMGET', key, 'u', 'p', 'seq')
  -- a damaged hash without its tenant cannot be queued: it stays in the DLQ (purge removes it)
  if v[1] ~= false and FQ_CALL('ZREM', q.dlq, id) == 1 then
    n = n + 1
    FQ_REC.ix_drop(q, 'failed', v[1], id) -- the browse indexes (record.lua)
    FQ_CALL('HSET', key, 'rc', '0', 'rec', '0', 'rs', '')
    FQ_CALL('HDEL', key, 'ft', 'err')
    FQ_CALL('DEL', fq_done_key(q, id)) -- alive again: result waiters must wait anew
    local r = {
      id = id, tenant = v[1], priority = FQ_TONUMBER(v[2]) or FQ_DEFAULT_PRIORITY,
      seq = FQ_TONUMBER(v[3]) or 0,
    }
    fq_bump(q, r.tenant, 'dlq_requeued', 1)
    fq_make_ready(q, r, q.now, false)
  end
end
fq_close(q)
return n
