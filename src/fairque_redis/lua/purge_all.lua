#!lua flags=allow-oom
--[[ purge_all: cancel every queued and scheduled task of the queue, atomically
  (InMemoryBackend.purge_all; see _include/purge.lua for what a purge does).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenants c:<t> n:<t> task:<id> children:<id> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  Returns: the number of tasks purged (dependents canceled with them not included)
]]
--- @include "_include/purge"

local q = fq_open(KEYS, ARGV)
local n = 0
-- every tenant with ready work is in the tenants index (entered on its first push)
for _, u in ipairs(FQ_CALL('ZRANGE', fq_tenants_key(q), 0, -1)) do
  n = n + FQ_PURGE.ready(q, u)
end
n = n + FQ_PURGE.scheduled(q, nil)
fq_close(q)
return n
