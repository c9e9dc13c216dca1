#!lua flags=no-writes
--[[ tenant_weights: the stride and tier of each tenant named (InMemoryBackend.tenant_weights).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8..] tenant ids
  Returns: {stride, tier, ...}, one pair per tenant in order (a tenant never given a weight
           reads as the default stride and tier 0)
]]
--- @include "_include/tenant"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local out = {}
for k = 8, #ARGV do
  -- a plain read (fq_tenant may migrate an old record, a write)
  local v = FQ_CALL('HMGET', fq_tenant_key(q, ARGV[k]), 'stride', 'tier')
  table.insert(out, fq_int(FQ_TONUMBER(v[1]) or FQ_DEFAULT_STRIDE))
  table.insert(out, fq_int(FQ_TONUMBER(v[2]) or 0))
end
return out
