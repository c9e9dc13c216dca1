#!lua flags=no-writes
--[[ stats: queue counters and gauges (stats), or one tenant's (tenant_stats).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) active:<tier>, and for a tenant c:<tenant> n:<tenant> ts:<tenant>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] tenant id ('' = the whole queue)
  Returns: flat {name, value, ...}: every counter present in the hash, then the gauges
           (queue: ready scheduled leased dlq active_tenants paused intake; tenant: ready
           scheduled leased); paused: 1 while the queue is paused (pause.lua); intake: entries
           waiting in the intake, not yet ingested (ADR 47)
]]
--- @include "_include/core"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local u = ARGV[8]
local out
if u == '' then
  out = FQ_CALL('HGETALL', q.stats)
  local active = 0
  for _, tier in ipairs(FQ_CALL('ZRANGE', q.tiers, 0, -1)) do
    active = active + FQ_CALL('ZCARD', fq_active_key(q, tier))
  end
  -- pcall: an intake of another type (damaged) reads as empty here; a claim reports the key
  local intake = FQ_PCALL('LLEN', fq_intake_key(q))
  if FQ_TYPE(intake) ~= 'number' then intake = 0 end
  local gauges = {
    'ready', FQ_TONUMBER(FQ_CALL('HGET', q.meta, 'ready') or '0'),
    'scheduled', FQ_CALL('ZCARD', q.delayed),
    'leased', FQ_CALL('ZCARD', q.leases),
    'dlq', FQ_CALL('ZCARD', q.dlq),
    'active_tenants', active,
    'paused', FQ_CALL('HGET', q.meta, 'pau') == '1' and 1 or 0,
    'intake', intake,
  }
  for _, x in ipairs(gauges) do table.insert(out, x) end
else
  out = FQ_CALL('HGETALL', fq_tenant_stats_key(q, u))
  table.insert(out, 'ready')
  table.insert(out, FQ_CALL('LLEN', fq_critical_key(q, u)) + FQ_CALL('ZCARD', fq_normal_key(q, u)))
end
return out
