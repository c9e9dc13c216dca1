#!lua flags=allow-oom
--[[ set_key_limits: set or clear a limit key's limits (ADR 79; InMemoryBackend.set_key_limits,
  fairque_core/memory/key_limits.py set_key_limits).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) keylim ks:<key> kp:<scope> parked task:<id> c:<t> n:<t> tenant:<t> active:<tier>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] the limit key  ARGV[9] its record `max_running,rate,burst,g` ('' clears it)
  Meta `klim` follows whether any key has limits. Every task parked under the key goes back
  to its tenant's queue (scopes in order, each in push order), and its scopes leave the parked set.
  Returns: 1
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV)
local k, record = ARGV[8], ARGV[9]
local all = fq_keylim_key(q)
if record == '' then
  FQ_CALL('HDEL', all, k)
else
  FQ_CALL('HSET', all, k, record)
end
if FQ_CALL('HLEN', all) > 0 then
  FQ_CALL('HSET', q.meta, 'klim', '1')
else
  FQ_CALL('HDEL', q.meta, 'klim')
end
-- the key's scopes (a field `<x>|<t>` of ks:<key> names scope `<key>|<t>`), in order
local seen, tenants = {}, {}
local fields = FQ_CALL('HGETALL', fq_keylim_key(q, 'ks', k)) -- (field, value, ...)
for i = 1, #fields, 2 do
  local t = FQ_SUB(fields[i], 3)
  if not seen[t] then
    seen[t] = true
    tenants[#tenants + 1] = t
  end
end
table.sort(tenants)
for _, t in ipairs(tenants) do
  local scope = k .. '|' .. t
  FQ_CALL('ZREM', fq_parked_key(q), '|k|' .. scope)
  while FQ_KEYLIM.release(q, scope) do end
end
fq_close(q)
return 1
