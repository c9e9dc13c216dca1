#!lua flags=allow-oom
--[[ requeue_expired: the reaper; expired leases back to their queue or, past
  max recoveries, to the DLQ as expired (InMemoryBackend.requeue_expired). A lease whose
  deadline is still the one its claim gave (`cdl`: never heartbeated) gives its tenant's turn
  back (fq_refund).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> children:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] limit (most leases handled in this call)
  Returns: how many expired leases were handled
]]
--- @include "_include/deps"

local q = fq_open(KEYS, ARGV)
local limit = FQ_TONUMBER(ARGV[8])
if limit <= 0 then return 0 end
local expired = FQ_CALL('ZRANGEBYSCORE', q.leases, '-inf', fq_int(q.now), 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local r = fq_rec(q, id)
  if r == nil then
    -- a lease whose task hash is gone (deleted by hand, evicted): drop the stray entry
    FQ_CALL('ZREM', q.leases, id)
  else
  -- a lease no heartbeat extended (deadline still the claim's) never started: refund its turn
  local dl = FQ_CALL('HMGET', fq_task_key(q, id), 'dl', 'cdl')
  if dl[2] ~= false and dl[1] == dl[2] then fq_refund(q, r.tenant) end
  FQ_REC.record_attempt(q, r.key, 'expired', '') -- the task's story (record.lua)
  fq_drop_lease(q, r)
  r.recoveries = r.recoveries + 1
  FQ_CALL('HSET', fq_task_key(q, id), 'rec', fq_int(r.recoveries))
  if r.recoveries > (q.max_recoveries or fq_header(q, 'max_recoveries')) then
    FQ_DEPS.to_dlq(q, r, 'expired', 'lease expired ' .. fq_int(r.recoveries) .. ' times')
  else
    fq_bump(q, r.tenant, 'recovered', 1)
    fq_event_task(q, 'retried', id, r.tenant, 'expired', 'lease expired ' .. fq_int(r.recoveries) .. ' times')
    fq_make_ready(q, r, r.ready_ms, true)
  end
  end
end
fq_close(q)
return #expired
