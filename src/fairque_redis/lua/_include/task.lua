--[[ task: reading a task record and moving it between the queue's structures.

  Task hash fields: u tenant, p priority (1-6), b body, m message metadata (opaque JSON written by
  the client), rc retry count, seq push sequence, st state, rd ready ms, due due ms, dms delay
  ms, tok lease token, wk worker id, dl lease deadline ms, rec recoveries, ft failure type,
  rs reason, mv moved-to-DLQ ms, res result (absent = None), exp logical expiry ms, err the
  failure record of a final failure, uk the unique key's Redis key and uw its window ms, wt 1
  once a result waiter armed the end notification (watch.lua), ct 1 once canceled while
  started with terminate (cancel.lua, ADR 76).
  A record read into Lua (fq_rec) names them in full: id, state, tenant, priority, seq, ready_ms,
  due_ms, delay_ms, token, recoveries, unique_key, unique_window, limited, waited.
]]
--- @include "limits"
--- @include "record"
--- @include "events"

-- the live record of task `id` (nil when absent or past its logical expiry); its key is kept
-- (r.key) for the writes that follow
local function fq_rec(q, id)
  local key = fq_task_key(q, id)
  local v = FQ_CALL('HMGET', key,
    'st', 'u', 'p', 'seq', 'exp', 'rd', 'due', 'dms', 'tok', 'rec', 'uk', 'uw',
    'lc', 'wt')
  -- a hash without a state or a tenant (damaged behind the client's back) cannot be accounted
  -- for: it reads as absent (a lease on it is lost; the reaper drops its stray lease entry)
  if v[1] == false or v[2] == false then return nil end
  if fq_expired(v[5], q.now) then return nil end
  -- damaged numbers read as defaults rather than failing the script halfway through its writes
  return {
    id = id, key = key, state = v[1], tenant = v[2],
    priority = FQ_TONUMBER(v[3]) or FQ_DEFAULT_PRIORITY,
    seq = FQ_TONUMBER(v[4]) or 0, ready_ms = FQ_TONUMBER(v[6]) or 0, due_ms = FQ_TONUMBER(v[7]) or 0,
    delay_ms = FQ_TONUMBER(v[8]) or 0, token = v[9], recoveries = FQ_TONUMBER(v[10]) or 0,
    unique_key = v[11], unique_window = FQ_TONUMBER(v[12]) or 0,
    limited = v[13] == '1', -- lc: claimed while limits were in use (limits.lua)
    waited = v[14] == '1', -- wt: a result waiter armed the end notification (watch.lua)
  }
end

-- forget every key of task `id` (an expired record being replaced, or a DLQ purge),
-- including its XCom values (xcom:<tenant>:<id>, the tenant read from the record): they live
-- as long as the record, and a logical expiry deletes nothing, so a reused id would read the
-- old task's values otherwise. A key damaged into another type has no tenant to read (pcall)
-- and is deleted all the same
local function fq_forget(q, id)
  local key = fq_task_key(q, id)
  local u = FQ_PCALL('HGET', key, 'u')
  local keys = {key, fq_waits_key(q, id), fq_children_key(q, id), fq_done_key(q, id)}
  if FQ_TYPE(u) == 'string' then keys[5] = fq_xcom_key(q, u, id) end
  FQ_CALL('DEL', unpack(keys))
end

-- the task ended (finished, failed for good, canceled). Its unique key, if it still holds
-- it, becomes `<id>|<until ms>` for its window (read by push against the clock; on server
-- time also a real PEXPIRE), or is freed; then the end notification: one token in
-- done:<id>, which result waiters block on (BLMOVE done done: they wake without taking it),
-- left only when a waiter armed it (`wt`, watch.lua): most tasks end with nobody waiting
local function fq_ended(q, r)
  local ukey = r.unique_key
  if ukey and ukey ~= '' and FQ_CALL('GET', ukey) == r.id then
    if r.unique_window > 0 then
      FQ_CALL('SET', ukey, r.id .. '|' .. fq_int(q.now + r.unique_window))
      if q.server_time then FQ_CALL('PEXPIRE', ukey, fq_int(r.unique_window)) end
    else
      FQ_CALL('DEL', ukey)
    end
  end
  if not r.waited then return end
  local done = fq_done_key(q, r.id)
  if FQ_CALL('LLEN', done) == 0 then FQ_CALL('RPUSH', done, '1') end
  FQ_CALL('PEXPIRE', done, fq_int(math.max(q.result_ttl_ms or fq_header(q, 'result_ttl_ms'), 1)))
end

-- into the tenant's critical FIFO (head when given back) or scored set, tenant activated;
-- the caller has already set st=queued and rd=ready_ms on the task hash
local function fq_enqueue(q, r, ready_ms, head)
  r.state = 'queued'
  r.ready_ms = ready_ms
  if r.priority == FQ_CRITICAL_PRIORITY then
    if head then
      FQ_CALL('LPUSH', fq_critical_key(q, r.tenant), r.id)
    else
      FQ_CALL('RPUSH', fq_critical_key(q, r.tenant), r.id)
    end
  else
    FQ_CALL('ZADD', fq_normal_key(q, r.tenant),
      fq_int(fq_score(r.priority, ready_ms, q.horizon_ms)), fq_member(r.seq, r.id))
  end
  q.ready_delta = q.ready_delta + 1
  q.wake = true
  fq_activate(q, r.tenant)
end

-- fq_enqueue with the task hash updated (state queued, ready time)
local function fq_make_ready(q, r, ready_ms, head)
  FQ_CALL('HSET', fq_task_key(q, r.id), 'st', 'queued', 'rd', fq_int(ready_ms))
  fq_enqueue(q, r, ready_ms, head)
end

local function fq_remove_ready(q, r)
  if r.priority == FQ_CRITICAL_PRIORITY then
    FQ_CALL('LREM', fq_critical_key(q, r.tenant), 1, r.id)
  else
    FQ_CALL('ZREM', fq_normal_key(q, r.tenant), fq_member(r.seq, r.id))
  end
  q.ready_delta = q.ready_delta - 1
  if not fq_has_ready(q, r.tenant) then fq_deactivate(q, r.tenant) end
end

-- into `delayed` until due. A due time earlier than every other one moves the queue's next
-- due time: q.resched raises the schedule signal (fq_close), so that an idle worker blocked
-- until the old next due time looks again (wait_for_work). The head is read once per call.
local function fq_schedule(q, r, due_ms)
  FQ_CALL('HSET', fq_task_key(q, r.id), 'st', 'scheduled', 'due', fq_int(due_ms))
  r.state = 'scheduled'
  r.due_ms = due_ms
  if q.first_due == nil then
    local head = FQ_CALL('ZRANGE', q.delayed, 0, 0, 'WITHSCORES')
    q.first_due = FQ_TONUMBER(head[2]) or math.huge
  end
  if due_ms < q.first_due then
    q.first_due = due_ms
    q.resched = true
  end
  FQ_CALL('ZADD', q.delayed, fq_int(due_ms), r.id)
  fq_bump(q, r.tenant, 'scheduled', 1)
end

-- the lease ends: its fields are cleared in one HSET together with the caller's `fields`
-- (field, value, ... to write as well, or nil; the table is extended); the leases entry is
-- removed at once, or, when `unlease` (a list) is given, appended to it for the caller's one
-- batched ZREM. With `keep_token` the token stays in `tok` (finish: a repeat of the same
-- finish is recognised; `tok` is then left as it is, not written again)
local function fq_drop_lease(q, r, fields, unlease, keep_token)
  if unlease == nil then
    FQ_CALL('ZREM', q.leases, r.id)
  else
    unlease[#unlease + 1] = r.id
  end
  fq_bump(q, r.tenant, 'leased', -1)
  if r.limited then fq_limits_lease_ended(q, r.tenant) end
  -- the lease's fields go after the caller's, in its table (none overlap)
  local args = fields or {}
  local n = #args
  args[n + 1], args[n + 2], args[n + 3], args[n + 4] = 'wk', '', 'dl', '0'
  if not keep_token then
    args[n + 5], args[n + 6] = 'tok', ''
    r.token = ''
  end
  FQ_CALL('HSET', r.key or fq_task_key(q, r.id), unpack(args))
end

-- the record of a task leased with `token`, or nil (the caller reports FQ_E_LEASE_LOST)
local function fq_leased(q, id, token)
  local r = fq_rec(q, id)
  if r == nil or r.state ~= 'started' or r.token ~= token then return nil end
  return r
end

-- a finished or canceled record lives on for the result TTL. The `exp` field is the logical
-- expiry every read checks; on server time the keys also get a real PEXPIRE of the same TTL.
-- With an injected clock (tests) server and clock time differ, so only the logical one applies.
--
-- fq_expire_record sets the real expiries only (the caller has written `exp`). waits:<id> can
-- exist only for a record closed while deferred: a task leaves `deferred` for the queue when
-- its last parent's SREM empties the set, and Redis deletes an empty set, so a finished task
-- never has one. children:<id> is expired only when `with_children` (finish knows it from its
-- LRANGE of the list; the other callers pass true).
local function fq_expire_record(q, r, with_children)
  if not q.server_time then return end
  local ms = q.ttl_s
  if ms == nil then
    ms = fq_int(math.max(q.result_ttl_ms or fq_header(q, 'result_ttl_ms'), 0))
    q.ttl_s = ms
  end
  FQ_CALL('PEXPIRE', r.key or fq_task_key(q, r.id), ms)
  if r.state ~= 'finished' then FQ_CALL('PEXPIRE', fq_waits_key(q, r.id), ms) end
  if with_children then FQ_CALL('PEXPIRE', fq_children_key(q, r.id), ms) end
end

local function fq_close_record(q, r)
  FQ_REC.record_canceled(q, r) -- (only canceled records close here) record.lua
  FQ_CALL('HSET', r.key or fq_task_key(q, r.id), 'exp',
    fq_int(q.now + (q.result_ttl_ms or fq_header(q, 'result_ttl_ms'))))
  fq_expire_record(q, r, true)
  fq_ended(q, r)
end
