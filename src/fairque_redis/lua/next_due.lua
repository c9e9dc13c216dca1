#!lua flags=no-writes
--[[ next_due: how long until the queue's first scheduled task is due (wait_for_work).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  ARGV[1..7] common header (see _include/core.lua)
  (derived) parked: tenants held by a rate limit, by the time they may start (limits.lua)
  Returns: -1 when nothing is scheduled or parked, else the milliseconds until the first due
           time (0 when it is due: the next claim moves it into its tenant's queue)
]]
--- @include "_include/core"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local head = FQ_CALL('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
local parked = FQ_CALL('ZRANGE', fq_parked_key(q), 0, 0, 'WITHSCORES')
local first = FQ_TONUMBER(head[2] or parked[2])
if first == nil then return -1 end
if parked[2] ~= nil then first = math.min(first, FQ_TONUMBER(parked[2])) end
return math.max(0, first - q.now)
