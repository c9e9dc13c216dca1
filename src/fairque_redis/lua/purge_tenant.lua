#!lua flags=allow-oom
--[[ purge_tenant: cancel every queued and scheduled task of one tenant, atomically
  (InMemoryBackend.purge_tenant; see _include/purge.lua for what a purge does).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) c:<t> n:<t> task:<id> children:<id> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] tenant id
  Returns: the number of tasks purged (dependents canceled with them not included)
]]
--- @include "_include/purge"

local q = fq_open(KEYS, ARGV)
local u = ARGV[8]
local n = FQ_PURGE.ready(q, u) + FQ_PURGE.scheduled(q, u)
fq_close(q)
return n
