#!lua flags=no-writes
--[[ key_limits_get: a limit key's limits and, per scope, its leases counted and tasks parked
  (ADR 79; InMemoryBackend.key_limit_status).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) keylim ks:<key>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] the limit key ('': every key)
  Returns: {record ('' for none), then field, value, ... of ks:<key>}; for every key: key,
           record, ... of keylim
]]
--- @include "_include/core"

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local k = ARGV[8]
if k == '' then return FQ_CALL('HGETALL', fq_keylim_key(q)) end
local out = {FQ_CALL('HGET', fq_keylim_key(q), k) or ''}
for _, v in ipairs(FQ_CALL('HGETALL', fq_keylim_key(q, 'ks', k))) do out[#out + 1] = v end
return out
