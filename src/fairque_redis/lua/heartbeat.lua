#!lua flags=allow-oom
--[[ heartbeat: extend a live lease to now + lease (InMemoryBackend.heartbeat).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id  ARGV[9] lease token  ARGV[10] lease ms
  Returns: the new deadline (ms)
  Errors: FQ_E_LEASE_LOST <id>
]]
--- @include "_include/task"

local q = fq_open(KEYS, ARGV)
local id = ARGV[8]
local r = fq_leased(q, id, ARGV[9])
if r == nil then return fq_err('LEASE_LOST', id) end
local deadline = q.now + tonumber(ARGV[10])
redis.call('HSET', q.p .. 'task:' .. id, 'dl', fq_int(deadline))
redis.call('ZADD', q.leases, fq_int(deadline), id)
return deadline
