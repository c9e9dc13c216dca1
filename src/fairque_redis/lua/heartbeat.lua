#!lua flags=allow-oom
--[[ heartbeat: extend live leases to now + lease (heartbeat and heartbeat_batch).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] 1 = fail with FQ_E_LEASE_LOST on a lost lease (single heartbeat: N must be 1),
          0 = report it
  ARGV[9] lease ms  ARGV[10] number of items N, then per item: task id, lease token
  Returns: array of N integers, the new deadline (ms) of each item, 0 = lease lost (item left
           unchanged), -1 = its task was canceled while this lease held it, -2 = canceled with
           terminate (ADR 76)
  Errors: FQ_E_LEASE_LOST <id> (only when ARGV[8] is 1)
]]
--- @include "_include/task"

-- values (deadline, id, ...) per ZADD of the extended leases: unpack has a stack limit
local ZADD_CHUNK = 1000

local q = fq_open(KEYS, ARGV)
local strict = ARGV[8] == '1'
local deadline = q.now + FQ_TONUMBER(ARGV[9])
local dl = fq_int(deadline)
local n = FQ_TONUMBER(ARGV[10])
local out = {}
local leases = {} -- deadline, id, ...: one ZADD below
local i = 11
for k = 1, n do
  local id, token = ARGV[i], ARGV[i + 1]
  i = i + 2
  local r = fq_rec(q, id)
  if r == nil or r.state ~= 'started' or r.token ~= token then
    if strict then return fq_err('LEASE_LOST', id) end
    out[k] = 0
    if r ~= nil and r.state == 'canceled' and token ~= '' and r.token == token then
      out[k] = -1
      if FQ_CALL('HGET', fq_task_key(q, id), 'ct') == '1' then out[k] = -2 end
    end
  else
    FQ_CALL('HSET', fq_task_key(q, id), 'dl', dl)
    table.insert(leases, dl)
    table.insert(leases, id)
    out[k] = deadline
  end
end
for s = 1, #leases, ZADD_CHUNK do
  FQ_CALL('ZADD', q.leases, unpack(leases, s, math.min(s + ZADD_CHUNK - 1, #leases)))
end
return out
