#!lua flags=no-writes
--[[ limits_get: where a tenant stands against its limits (InMemoryBackend.limit_status).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t> ts:<t> c:<t> n:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] tenant id
  Returns: {now ms, own record, tier default record, running, queued, capped (0|1), tat (us),
           cap_hits, throttles, refusals, paused (0|1: the tenant's own `pau`)} (records as
           stored: `mr,rate,burst,mq`)
]]
--- @include "_include/limits"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local u = ARGV[8]
local v = FQ_CALL('HMGET', fq_tenant_key(q, u), 'lim', 'tier', 'capd', 'tat', 'pau')
local tier = fq_int(FQ_TONUMBER(v[2]) or 0)
local s = FQ_CALL('HMGET', fq_tenant_stats_key(q, u), 'leased', 'scheduled', 'cap_hits',
  'throttles', 'refusals')
local queued = FQ_CALL('LLEN', fq_critical_key(q, u)) + FQ_CALL('ZCARD', fq_normal_key(q, u))
  + (FQ_TONUMBER(s[2]) or 0)
return {
  q.now, v[1] or '', FQ_CALL('HGET', q.meta, 'lim:' .. tier) or '',
  FQ_TONUMBER(s[1]) or 0, queued, v[3] == '1' and 1 or 0, fq_int(FQ_TONUMBER(v[4]) or 0),
  FQ_TONUMBER(s[3]) or 0, FQ_TONUMBER(s[4]) or 0, FQ_TONUMBER(s[5]) or 0, v[5] == '1' and 1 or 0,
}
