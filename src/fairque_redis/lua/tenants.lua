#!lua flags=no-writes
--[[ tenants: a page of the tenants the queue has seen, and how many there are (list_tenants).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenants (kept by fq_close on a tenant's first push, see _include/core.lua)
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] offset  ARGV[9] limit (decimal integers >= 0; limit at most 1000)
  Returns: {total, id, ...}: the number of tenants in the index, then at most `limit` ids from
           position `offset`, in first-push order (ties by id, byte order)
  Errors: FQ_E_BAD_ARG offset|limit
]]
--- @include "_include/core"

-- the largest page (limit) one call returns
local MAX_LIMIT = 1000

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check

local function count_arg(s)
  if s == nil or FQ_FIND(s, '^%d+$') == nil then return nil end
  return FQ_TONUMBER(s)
end

local offset, limit = count_arg(ARGV[8]), count_arg(ARGV[9])
if offset == nil then return fq_err('BAD_ARG', 'offset') end
if limit == nil or limit > MAX_LIMIT then return fq_err('BAD_ARG', 'limit') end
local key = fq_tenants_key(q)
local total = FQ_CALL('ZCARD', key)
local out = {total}
if limit > 0 and offset < total then
  for _, u in ipairs(FQ_CALL('ZRANGE', key, fq_int(offset), fq_int(offset + limit - 1))) do
    table.insert(out, u)
  end
end
return out
