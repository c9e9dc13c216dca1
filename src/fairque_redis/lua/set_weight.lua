#!lua flags=allow-oom
--[[ set_weight: a tenant's stride and tier, its lag rescaled to the new stride, moving it
  between active sets if it is active (InMemoryBackend.set_tenant_weight, FairState.set_weight).

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
local stride = FQ_TONUMBER(ARGV[9])
-- the lag (never below 0) in turns of the old stride becomes as many turns of the new one:
-- floor(lag / old * new) in doubles, as fairness.rescale_lag computes it
local lag = math.max(0, t.pass - fq_vtime(q, fq_tier_key(q, t)))
lag = FQ_FLOOR(lag / t.stride * stride)
t.stride = stride
t.tier = FQ_TONUMBER(ARGV[10])
local tier = fq_tier_key(q, t)
t.pass = fq_vtime(q, tier) + lag
t.dirty = false -- written here with stride and tier
local fields = {'pass', fq_int(t.pass), 'stride', fq_int(t.stride), 'tier', fq_int(t.tier)}
if t.act ~= nil then
  table.insert(fields, 'act')
  table.insert(fields, fq_int(t.act))
end
FQ_CALL('HSET', fq_tenant_key(q, u), unpack(fields))
if was_active then
  fq_place(q, u, t)
  FQ_CALL('ZADD', q.tiers, tier, tier)
end
fq_close(q)
return 1
