#!lua flags=no-writes
--[[ paused_get: whether a tenant (its own flag) or the queue is paused
  (InMemoryBackend.is_paused).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenant:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] scope: 't' tenant, 'q' queue  ARGV[9] tenant id ('' for the queue)
  Returns: 1 paused, 0 not
]]
--- @include "_include/keys"

local key = KEYS[1]
if ARGV[8] == 't' then key = fq_tenant_key({prefix = fq_prefix(KEYS[1])}, ARGV[9]) end
return FQ_CALL('HGET', key, 'pau') == '1' and 1 or 0
