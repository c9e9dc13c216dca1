#!lua flags=no-writes
--[[ tenant_figures: the fairness figures of many tenants in one call (tenant_fairness).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) tenants, tenant:<t> ts:<t> c:<t> n:<t>, and task:<id> of each tenant's head tasks
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] offset  ARGV[9] limit (decimal integers >= 0; limit at most 1000): the page of the
          tenants index (first-push order) read when no tenant is named
  ARGV[10..] tenant ids (at most 1000): read these instead, in order
  Returns: flat, 15 values per tenant: id, stride, tier, ready (critical + normal), leased,
           claimed, pass minus the virtual time of its tier (0 without ready work), the ms
           since the earliest ready time of its head tasks (first of the critical list, first
           of the normal set; -1 without ready work), then its holds now as 0|1: paused (its
           `pau`), capped (`capd`), throttled (`hold` after now), the queue paused (meta
           `pau`), and its counters cap_hits, throttles, pauses (its hash's `npau`, pause.lua)
  Errors: FQ_E_BAD_ARG offset|limit

  Mirrors fairque_core/memory/figures.py. Read-only: a plain HMGET of each tenant record
  (fq_tenant may rewrite an old active-set member, a write); nothing is cached or counted.
]]
--- @include "_include/tenant"

-- the largest page (limit) one call returns, as tenants.lua
local MAX_LIMIT = 1000

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check

local function count_arg(s)
  if s == nil or FQ_FIND(s, '^%d+$') == nil then return nil end
  return FQ_TONUMBER(s)
end

-- the ready time (ms) of task id, nil when the record lacks it
local function ready_ms(id)
  return FQ_TONUMBER(FQ_CALL('HGET', fq_task_key(q, id), 'rd'))
end

local offset, limit = count_arg(ARGV[8]), count_arg(ARGV[9])
if offset == nil then return fq_err('BAD_ARG', 'offset') end
if limit == nil or limit > MAX_LIMIT then return fq_err('BAD_ARG', 'limit') end
local tenants = {}
if #ARGV >= 10 then
  for k = 10, #ARGV do table.insert(tenants, ARGV[k]) end
elseif limit > 0 then
  tenants = FQ_CALL('ZRANGE', fq_tenants_key(q), fq_int(offset), fq_int(offset + limit - 1))
end

local out = {}
local queue_paused = 0
if #tenants > 0 and FQ_CALL('HGET', q.meta, 'pau') == '1' then queue_paused = 1 end
local function flag(on)
  if on then return 1 end
  return 0
end
for _, u in ipairs(tenants) do
  local v = FQ_CALL('HMGET', fq_tenant_key(q, u), 'pass', 'stride', 'tier', 'pau', 'capd',
    'hold', 'npau')
  local t = {
    pass = FQ_TONUMBER(v[1]) or 0,
    stride = FQ_TONUMBER(v[2]) or FQ_DEFAULT_STRIDE,
    tier = FQ_TONUMBER(v[3]) or 0,
  }
  local c = FQ_CALL('HMGET', fq_tenant_stats_key(q, u), 'leased', 'claimed', 'cap_hits',
    'throttles')
  local critical = fq_critical_key(q, u)
  local normal = fq_normal_key(q, u)
  local ready = FQ_CALL('LLEN', critical) + FQ_CALL('ZCARD', normal)
  local ahead, waited = 0, -1
  if ready > 0 then
    ahead = t.pass - fq_vtime(q, fq_tier_key(q, t))
    local earliest = nil
    local head = FQ_CALL('LINDEX', critical, 0)
    if head then earliest = ready_ms(head) end
    local first = FQ_CALL('ZRANGE', normal, 0, 0)[1]
    if first ~= nil then
      local rd = ready_ms(FQ_SUB(first, FQ_SEQ_WIDTH + 1)) -- the member without its sequence
      if rd ~= nil and (earliest == nil or rd < earliest) then earliest = rd end
    end
    if earliest ~= nil then waited = math.max(0, q.now - earliest) end
  end
  local hold = FQ_TONUMBER(v[6])
  for _, x in ipairs({u, fq_int(t.stride), fq_int(t.tier), ready, FQ_TONUMBER(c[1] or '0'),
    FQ_TONUMBER(c[2] or '0'), fq_int(ahead), fq_int(waited), flag(v[4] == '1'),
    flag(v[5] == '1'), flag(hold ~= nil and hold > q.now), queue_paused,
    FQ_TONUMBER(c[3] or '0'), FQ_TONUMBER(c[4] or '0'), FQ_TONUMBER(v[7] or '0')}) do
    table.insert(out, x)
  end
end
return out
