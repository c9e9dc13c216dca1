#!lua flags=allow-oom
--[[ release: give a leased task back at once, in its old place (InMemoryBackend.release).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id  ARGV[9] token
  Returns: 1
  Errors: FQ_E_LEASE_LOST <id>
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV)
local id = ARGV[8]
local r = fq_leased(q, id, ARGV[9])
if r == nil then return fq_err('LEASE_LOST', id) end
fq_drop_lease(q, r)
fq_refund(q, r.tenant) -- released unstarted: the turn is given back (ADR 4)
fq_bump(q, r.tenant, 'released', 1)
fq_make_ready(q, r, r.ready_ms, true)
fq_close(q)
return 1
