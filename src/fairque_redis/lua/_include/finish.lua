--[[ finish helpers: mark leased tasks FINISHED with their results (finish.lua and the finish
  part of finish_claim.lua).

  The items are read from argv from `at` on: their number N, then per item: task id, token,
  has result (0|1), result, X, then X pairs of XCom key and encoded value.
  A finished record drops its body and metadata (b and m become empty, in the same HSET as
  the state: no HDEL) and counts its result's size in the result_bytes counter. Its XCom
  values go to xcom:<tenant>:<id> in the same step (so a child never sees a finished parent
  without them), kept as long as the record; the task's end is notified (fq_ended: result
  waiters wake, its unique key is held for its window); its dependents are released.
]]
--- @include "deps"
--- @include "record"
--- @include "forget"

-- ids per ZREM of the finished tasks' leases (and keys per EXISTS): unpack has a stack limit
local FQ_ZREM_CHUNK = 500

-- the fields a finish reads of a task's record: fq_rec's but those only a task made ready
-- again needs (priority, sequence, ready, due and delay times, recoveries) and the unique
-- key's window (read when it has a unique key); and `m`, whose task name the event tells
local function fq_read_finish(key)
  return FQ_CALL('HMGET', key, 'st', 'u', 'exp', 'tok', 'uk', 'lc', 'wt', 'm')
end

-- task `id`'s record (key `key`) as a finish reads it: `v` the reply of fq_read_finish (read
-- now when nil). Returns its fields as read: state, tenant, token, unique key, lc, wt, m;
-- the state false when absent or past its logical expiry, damaged as fq_rec reads it
local function fq_rec_finish(q, key, v)
  if v == nil then v = fq_read_finish(key) end
  local state, tenant = v[1], v[2]
  if state == false or tenant == false or fq_expired(v[3], q.now) then return false end
  return state, tenant, v[4], v[5], v[6], v[7], v[8]
end

-- whether any of the items' tasks has dependents (children:<id>), in one EXISTS per chunk:
-- when none has, no finish of the call reads a children list. Only a push adds to a children
-- list, so the answer holds for the whole finish
local function fq_any_children(q, argv, at, n)
  local keys = {}
  local i = at + 1
  for k = 1, n do
    keys[k] = fq_children_key(q, argv[i])
    i = i + 5 + 2 * FQ_TONUMBER(argv[i + 4])
  end
  for s = 1, n, FQ_ZREM_CHUNK do
    if FQ_CALL('EXISTS', unpack(keys, s, math.min(s + FQ_ZREM_CHUNK - 1, n))) > 0 then
      return true
    end
  end
  return false
end

-- finish.lua opens the queue unchecked (`later = true`): its type checks are made here,
-- before the first write, as far as what the call may write. A finish of one item reads its
-- record first (the read the loop would make: the reply is returned for it): when the task
-- has no dependents (`kin`) and is of the common kind (no unique key, no lease under limits,
-- no waiter, no XCom values), the finish writes the record, `leases`, `stats` and the
-- tenant's ts: key only, and raises no signal: only `leases` and `stats` are checked, not
-- meta nor the signal lists (nor the other sorted sets). `stats` by HLEN; `leases` by the
-- finish's own ZREM of the lease it ends, made here as its first write (a refusal then has
-- written nothing) when the read says the task finishes (started, the lease's token), and
-- the loop leaves `leases` alone (the second value returned, true); by ZCARD when it does
-- not. A finish of several items checks everything, as fq_open does (reading each record
-- first and keeping the replies costs more than the three commands it would save: the
-- tables' growth, ADR 54). A record key of another type: the general checks, then the loop's
-- read fails as it did
local function fq_finish_checks(q, argv, at, n, kin)
  if n ~= 1 then
    fq_check_queue(q, FQ_CHECK_ALL)
    return nil, false
  end
  local id, token, nx = argv[at + 1], argv[at + 2], FQ_TONUMBER(argv[at + 5])
  local v = FQ_PCALL('HMGET', fq_task_key(q, id), 'st', 'u', 'exp', 'tok', 'uk', 'lc', 'wt',
    'm')
  if v['err'] ~= nil then
    fq_check_queue(q, FQ_CHECK_ALL)
    return nil, false
  end
  if kin or v[5] ~= false or v[6] == '1' or v[7] == '1' or nx ~= 0 then
    fq_check_queue(q, FQ_CHECK_ALL)
    return v, false
  end
  q.checks_due = nil
  if FQ_TYPE(FQ_PCALL('HLEN', q.stats)) == 'table' then fq_check_type(q.stats, 'hash') end
  if v[1] ~= 'started' or v[4] ~= token or v[2] == false or fq_expired(v[3], q.now) then
    if FQ_TYPE(FQ_PCALL('ZCARD', q.leases)) == 'table' then fq_check_type(q.leases, 'zset') end
    return v, false
  end
  if FQ_TYPE(FQ_PCALL('ZREM', q.leases, id)) == 'table' then
    fq_check_type(q.leases, 'zset')
  end
  return v, true
end

-- `n` tasks of tenant u finished (their results `bytes` long in all): its `leased` gauge and
-- `finished` and `result_bytes` counters, as fq_drop_lease and fq_finish count one
local function fq_finish_bump(q, u, n, bytes)
  fq_bump_lease(q, u, -n, 'finished', n)
  if bytes > 0 then fq_bump(q, u, 'result_bytes', bytes) end
end

-- finish the items of argv (see the docblock; `at` is where N is). Returns the flags (N
-- integers: 1 = finished, 0 = lease lost, item left unchanged; a repeat of the finish that
-- finished the task, same token, is 1 and changes nothing: a finished task keeps its last
-- token in `tok`) and the index in argv after the items; or, with `strict`, nil and the
-- FQ_E_LEASE_LOST error reply at the first lost lease (the caller sends one item then: an
-- error reply undoes no item before it). The
-- leases of the finished tasks leave in one ZREM before it returns, so a claim later in the
-- same call counts them gone
local function fq_finish(q, argv, at, strict)
  local n = FQ_TONUMBER(argv[at])
  local out = {}
  local unlease = {}
  local kin = n > 0 and fq_any_children(q, argv, at, n)
  -- finish.lua: its checks, after the read of a single item's record (fq_finish_checks)
  local read, unleased = nil, false -- (a finish of one item: its record as read)
  if q.checks_due then read, unleased = fq_finish_checks(q, argv, at, n, kin) end
  local exp -- the logical expiry of what finishes now, formatted once
  local ttl_ms -- the real expiry (server time), formatted once
  -- `finished`, `leased` and `result_bytes` of a run of items of one tenant, counted once
  local run_u, run_n, run_bytes = nil, 0, 0
  local i = at + 1
  for k = 1, n do
    local id, token, has, result = argv[i], argv[i + 1], argv[i + 2], argv[i + 3]
    local forget
    has, forget = FQ_FORGET.flag(has) -- ('2' | '3': the record is not kept, ADR 78)
    local nx = FQ_TONUMBER(argv[i + 4])
    local xat = i + 5
    i = i + 5 + 2 * nx
    local key = fq_task_key(q, id)
    local state, tenant, tok, ukey, lc, wt, m = fq_rec_finish(q, key, read)
    if state == 'finished' and token ~= '' and tok == token then
      out[k] = 1 -- a repeat of this lease's finish (its reply was lost): done, nothing changes
    elseif state ~= 'started' or tok ~= token then
      if strict then return nil, fq_err('LEASE_LOST', id) end
      out[k] = 0
    else
      fq_event_task(q, 'completed', id, tenant, nil, nil, m)
      -- one HSET: lease fields cleared, state, logical expiry and result. `res` needs no HDEL
      -- when there is no result: only finish writes it, and a finished task is never leased
      -- again. The payload goes in the same HSET: the body and the message metadata only a
      -- run needs become empty (the record keeps state, tenant, priority, retry count and
      -- result for the result TTL; docs/delivery.md; no reader decodes a finished task's
      -- payload). The token stays in `tok` (a repeat of the finish is recognised)
      local ttl = q.result_ttl_ms or fq_header(q, 'result_ttl_ms')
      if exp == nil then exp = fq_int(q.now + ttl) end
      if ukey == false and lc ~= '1' and wt ~= '1' and nx == 0 and not kin then
        -- the common task (no unique key, no limits, no waiter, no XCom, no dependents):
        -- fq_drop_lease, fq_expire_record and fq_ended's writes, inline
        unlease[#unlease + 1] = id
        if forget then
          -- nothing needs it: the record goes (ADR 78), with no story and no index entry
          FQ_FORGET.record(key)
        else
          FQ_REC.record_finish(q, key, id, tenant) -- the task's story (record.lua)
          if has == '1' then
            FQ_CALL('HSET', key, 'st', 'finished', 'exp', exp, 'b', '', 'm', '', 'res', result,
              'wk', '', 'dl', '0')
          else
            FQ_CALL('HSET', key, 'st', 'finished', 'exp', exp, 'b', '', 'm', '', 'wk', '',
              'dl', '0')
          end
          if q.server_time then
            if ttl_ms == nil then ttl_ms = fq_int(math.max(ttl, 0)) end
            FQ_CALL('PEXPIRE', key, ttl_ms)
          end
        end
        if tenant ~= run_u then
          if run_n > 0 then fq_finish_bump(q, run_u, run_n, run_bytes) end
          run_u, run_n, run_bytes = tenant, 0, 0
        end
        run_n = run_n + 1
        if has == '1' then run_bytes = run_bytes + #result end
      else
        -- what the general steps read of the counters is complete (fq_limits_running)
        if run_n > 0 then fq_finish_bump(q, run_u, run_n, run_bytes) end
        run_u, run_n, run_bytes = nil, 0, 0
        local r = {
          id = id, key = key, state = state, tenant = tenant, token = tok, unique_key = ukey,
          unique_window = ukey and FQ_TONUMBER(FQ_CALL('HGET', key, 'uw')) or 0,
          limited = lc == '1', waited = wt == '1',
        }
        -- not kept and nothing needs it (ADR 78): deleted after the bookkeeping below,
        -- with no story and no index entry
        local drop = forget and FQ_FORGET.ok(q, r, nx, kin)
        if not drop then FQ_REC.record_finish(q, key, id, tenant) end -- the task's story
        local fields = {'st', 'finished', 'exp', exp, 'b', '', 'm', ''}
        if has == '1' then
          fields[9] = 'res'
          fields[10] = result
        end
        fq_drop_lease(q, r, fields, unlease, true)
        if nx > 0 then
          local xkey = fq_xcom_key(q, tenant, id)
          FQ_CALL('DEL', xkey)
          -- field-value pairs per HSET, FQ_ZREM_CHUNK at a time: unpack has a stack limit
          local last = xat + 2 * nx - 1
          for s = xat, last, 2 * FQ_ZREM_CHUNK do
            FQ_CALL('HSET', xkey, unpack(argv, s, math.min(s + 2 * FQ_ZREM_CHUNK - 1, last)))
          end
          if q.server_time then
            FQ_CALL('PEXPIRE', xkey, fq_int(math.max(ttl, 1)))
          end
        end
        r.state = 'finished'
        fq_bump(q, tenant, 'finished', 1)
        if has == '1' then fq_bump(q, tenant, 'result_bytes', #result) end
        local kids = kin and FQ_DEPS.release_dependents(q, r) or 0
        fq_expire_record(q, r, kids > 0)
        fq_ended(q, r)
        if drop then FQ_FORGET.record(key) end
      end
      out[k] = 1
    end
  end
  if run_n > 0 then fq_finish_bump(q, run_u, run_n, run_bytes) end
  FQ_REC.ix_flush(q) -- the finished tasks into the browse indexes (record.lua)
  -- the leases of the finished tasks leave in one ZREM (chunked, see FQ_ZREM_CHUNK)
  -- (unleased: fq_finish_checks has ended them, every one a common task's)
  for s = 1, unleased and 0 or #unlease, FQ_ZREM_CHUNK do
    FQ_CALL('ZREM', q.leases, unpack(unlease, s, math.min(s + FQ_ZREM_CHUNK - 1, #unlease)))
  end
  return out, i
end
