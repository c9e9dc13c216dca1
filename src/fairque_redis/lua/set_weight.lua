#!lua flags=allow-oom
--[[ set_weight: a tenant's stride and tier, moving it between active sets if it is active
  (InMemoryBackend.set_tenant_weight).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t> active:<tier>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] tenant id  ARGV[9] stride (integer >= 1)  ARGV[10] tier (0-1000)
  Returns: 1
]]
--- @include "_include/tenant"

local q = fq_open(KEYS, ARGV)
local u = ARGV[8]
local t = fq_tenant(q, u)
local was_active = fq_is_active(q, u)
if was_active then fq_deactivate(q, u) end
t.stride = tonumber(ARGV[9])
t.tier = tonumber(ARGV[10])
redis.call('HSET', fq_tenant_key(q, u), 'pass', fq_int(t.pass), 'stride', fq_int(t.stride),
  'tier', fq_int(t.tier))
if was_active then
  local tier = fq_int(fq_tier(q, t))
  redis.call('ZADD', fq_active_key(q, tier), fq_int(t.pass), u)
  redis.call('ZADD', q.tiers, tier, tier)
end
return 1
