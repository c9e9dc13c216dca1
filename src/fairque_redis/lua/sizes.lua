#!lua flags=no-writes
--[[ sizes: queue depths of many tenants in one call (queue_sizes).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) c:<tenant> n:<tenant> ts:<tenant>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] number of tenants N, then N tenant ids
  Returns: 4N integers: critical, normal, scheduled, leased of each tenant in order
]]
--- @include "_include/core"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local out = {}
for k = 1, FQ_TONUMBER(ARGV[8]) do
  local u = ARGV[8 + k]
  local g = FQ_CALL('HMGET', fq_tenant_stats_key(q, u), 'scheduled', 'leased')
  table.insert(out, FQ_CALL('LLEN', fq_critical_key(q, u)))
  table.insert(out, FQ_CALL('ZCARD', fq_normal_key(q, u)))
  table.insert(out, FQ_TONUMBER(g[1] or '0'))
  table.insert(out, FQ_TONUMBER(g[2] or '0'))
end
return out
