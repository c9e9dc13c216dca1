#!lua
--[[ push: store N messages in one call, idempotent by task id (InMemoryBackend.push_batch).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> waits:<id> children:<id> c:<tenant> n:<tenant> tenant:<t> ts:<t>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8]  number of messages N
  then per message: id, user, priority (1-6), delay ms, meta (opaque), body, D, D parent ids
  Returns: array of N integers, 1 = stored, 0 = known id (duplicate)
  Errors: FQ_E_BAD_ID, FQ_E_BAD_ARG, FQ_E_TOO_LARGE <size> <limit>, FQ_E_UNKNOWN_DEP <id>
  Every dependency must name a live task or one earlier in the batch; all messages are checked
  before the first write, so a refused batch changes nothing.
]]
--- @include "_include/deps"

local q = fq_open(KEYS, ARGV)
local n = tonumber(ARGV[8])
local msgs = {}
local i = 9
for k = 1, n do
  local m = {
    id = ARGV[i], u = ARGV[i + 1], p = tonumber(ARGV[i + 2]), dms = tonumber(ARGV[i + 3]),
    ps = ARGV[i + 2], dmss = ARGV[i + 3],
    meta = ARGV[i + 4], body = ARGV[i + 5], deps = {},
  }
  local nd = tonumber(ARGV[i + 6])
  for d = 1, nd do m.deps[d] = ARGV[i + 6 + d] end
  i = i + 7 + nd
  msgs[k] = m
end

local function valid_id(s)
  return #s >= 1 and #s <= 128 and string.find(s, '^[%w_%.:@/%+=#%-]+$') ~= nil
end

-- check everything before the first write
local seen = {}
for _, m in ipairs(msgs) do
  if not valid_id(m.id) then return fq_err('BAD_ID', 'task_id') end
  if not valid_id(m.u) then return fq_err('BAD_ID', 'user_id') end
  if m.p == nil or m.p < 1 or m.p > 6 or m.p ~= math.floor(m.p) then
    return fq_err('BAD_ARG', 'priority')
  end
  if m.dms == nil or m.dms ~= math.floor(m.dms) or m.ps ~= fq_int(m.p) then
    return fq_err('BAD_ARG', 'priority or delay')
  end
  if #m.body > q.max_payload then
    return fq_err('TOO_LARGE', fq_int(#m.body) .. ' ' .. fq_int(q.max_payload))
  end
  for _, dep in ipairs(m.deps) do
    if not valid_id(dep) then return fq_err('BAD_ID', 'depends_on') end
    if not seen[dep] and fq_rec(q, dep) == nil then return fq_err('UNKNOWN_DEP', dep) end
  end
  seen[m.id] = true
end

local out = {}
for k, m in ipairs(msgs) do
  local key = q.p .. 'task:' .. m.id
  local v = redis.call('HMGET', key, 'st', 'exp')
  local expired = v[1] ~= false and v[2] ~= false and tonumber(v[2]) <= q.now
  if v[1] ~= false and not expired then
    fq_bump(q, m.u, 'duplicates', 1)
    out[k] = 0
  else
    if expired then fq_forget(q, m.id) end
    local seq = fq_next_seq(q)
    local due = q.now + math.max(0, m.dms)
    local r = {id = m.id, u = m.u, p = m.p, seq = seq, due = due, dms = m.dms, st = 'queued'}
    fq_bump(q, m.u, 'pushed', 1)
    local failed_parent = nil
    local waiting = false
    for _, dep in ipairs(m.deps) do
      local parent = fq_rec(q, dep)
      if parent ~= nil then
        if parent.st == 'failed' or parent.st == 'canceled' then
          failed_parent = dep
        elseif parent.st ~= 'finished' then
          redis.call('SADD', q.p .. 'waits:' .. m.id, dep)
          redis.call('RPUSH', q.p .. 'children:' .. dep, m.id)
          waiting = true
        end
      end
    end
    -- the common case (ready now) is written in one HSET; the rest take their own path
    local ready_now = failed_parent == nil and not waiting and due <= q.now
    redis.call('HSET', key, 'u', m.u, 'p', m.ps, 'b', m.body, 'm', m.meta, 'rc', '0',
      'seq', fq_int(seq), 'st', 'queued', 'rd', fq_int(ready_now and q.now or 0),
      'due', fq_int(due), 'dms', m.dmss, 'rec', '0')
    if ready_now then
      fq_enqueue(q, r, q.now, false)
    elseif failed_parent ~= nil then
      redis.call('HSET', key, 'st', 'canceled', 'rs', 'dependency ' .. failed_parent .. ' did not finish')
      fq_bump(q, m.u, 'canceled', 1)
      fq_close_record(q, r)
    elseif waiting then
      redis.call('HSET', key, 'st', 'deferred')
    else
      fq_schedule(q, r, due)
    end
    out[k] = 1
  end
end
fq_close(q)
return out
