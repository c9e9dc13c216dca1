#!lua flags=allow-oom
--[[ pause: pause or resume a tenant or the whole queue (InMemoryBackend.pause/resume,
  fairque_core/memory/pause.py).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t> c:<t> n:<t> active:<tier> parked
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] scope: 't' tenant, 'q' queue  ARGV[9] tenant id ('' for the queue)
  ARGV[10] 1 pause, 0 resume
  A paused tenant (its hash's `pau` = 1) leaves its active set and fq_activate keeps it out,
  as a capped one; on resume it enters like a newcomer (unless a limit holds it). A paused
  queue (meta `pau` = 1) leases nothing: claim.lua reads the flag in fq_meta's HMGET.
  Resuming raises the wake signal.
  Each call is told in the event log (paused or resumed, _include/events.lua).
  Returns: 1
]]
--- @include "_include/tenant"
--- @include "_include/events"

local q = fq_open(KEYS, ARGV)
local scope, u, on = ARGV[8], ARGV[9], ARGV[10] == '1'

if scope == 'q' then
  if on then
    FQ_CALL('HSET', q.meta, 'pau', '1')
  else
    FQ_CALL('HDEL', q.meta, 'pau')
  end
else
  local t = fq_tenant(q, u)
  local key = fq_tenant_key(q, u)
  if on then
    -- npau: times paused, read by tenant_figures.lua (a pause began between two readings)
    if not t.paused then FQ_CALL('HINCRBY', key, 'npau', 1) end
    t.paused = true
    FQ_CALL('HSET', key, 'pau', '1')
    if fq_is_active(q, u) then fq_deactivate(q, u) end
  else
    t.paused = false
    FQ_CALL('HDEL', key, 'pau')
    if fq_has_ready(q, u) then fq_activate(q, u) end
  end
end
if not on then q.wake = true end
fq_event(q, on and 'paused' or 'resumed', 'u', u)
fq_close(q)
return 1
