#!lua flags=allow-oom
--[[ ingest: up to `limit` entries of the intake into the queue, in order, each as push.lua
  would push its message now (ADR 47; the work is fq_ingest, _include/intake.lua, which every
  claim also runs first).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) intake intake:bad, and push.lua's keys of each message
  ARGV[1..7] common header (see _include/core.lua; ARGV[7], the max payload, applies)
  ARGV[8] limit (>= 1)
  Returns: {ingested, duplicates, rejected (to the DLQ or intake:bad), entries left}
  Errors: FQ_E_DAMAGED <intake key> <type> list (nothing ingested)
]]
--- @include "_include/intake"

local q = fq_open(KEYS, ARGV, {meta = true})
local stored, dups, rejected, left = fq_ingest(q, FQ_TONUMBER(ARGV[8]))
if stored == nil then return fq_err('DAMAGED', dups) end
fq_close(q)
return {stored, dups, rejected, left}
