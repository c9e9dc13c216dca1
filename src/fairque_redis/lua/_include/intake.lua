--[[ intake: ingesting the queue's intake (ADR 47): ingest.lua, and every claim first thing
  (fq_claim, claim.lua).

  The list `intake` holds one entry per message a producer appended with
  RedisBackend.push_intake (a plain RPUSH, no script; fairque_redis/scripting/calls/intake.py
  writes them, or the intake client fairque_redis/accel/intake.py, byte for byte the same):
    1|<task id>|<tenant>|<priority 1-6>|<delay ms, <= 0>|<length of meta>|<meta><body>
  The ids follow the id grammar (no '|'), the meta is counted and the body is the rest, so any
  bytes read back unchanged. Ingesting an entry does what push.lua does for that message at
  that moment (its helpers in _include/pushing.lua): stored ready now, or a duplicate of a
  live task (counted as push counts it). Where push would refuse the message (its tenant at
  max_queued, a payload over the header's max payload, a key of its tenant holding another
  type, fields after the tenant that do not read) the entry does not fail the call: the
  message becomes a task record in state failed, in the dead-letter queue with failure type
  `rejected` and the reason (FQ_DEPS.to_dlq, as a task that fails for good: counted `dead`). An
  entry whose id or tenant does not read, or whose task key holds another type, is moved raw
  to `intake:bad`. The entries are read with LRANGE and popped once they are done (LPOP with
  a count, a command the documented least-rights ACL has): an error half-way (a damaged key
  no check foresaw) loses none, and ingesting one again finds its id stored (a duplicate).
]]
--- @include "pushing"

-- the most entries a claim ingests before it picks (INTAKE_CLAIM_LIMIT in
-- fairque_core/domain/intake.py; a test keeps the two equal)
local FQ_INTAKE_CLAIM_LIMIT = 256
-- an entry of version 1: id, tenant, priority, delay, meta length, then where meta starts
local FQ_INTAKE_HEAD = '^1|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(%d+)|()'
local FQ_REJECTED = 'rejected'
local FQ_REJECTED_AT = 'rejected at ingest: '

-- message `id` of u becomes a failed record in the DLQ with the refusal `why`: numbered as
-- the push it stands for would have been, so a requeue orders it as one
local function fq_intake_reject(q, pc, key, id, u, ps, dmss, meta, body, why)
  FQ_CALL('HSET', key, 'u', u, 'p', ps, 'b', body, 'm', meta, 'rc', '0',
    'seq', fq_int(fq_next_seq(q)), 'st', 'queued', 'rd', '0', 'due', pc.now_s, 'dms', dmss,
    'rec', '0')
  FQ_DEPS.to_dlq(q, {id = id, key = key, tenant = u}, FQ_REJECTED, FQ_REJECTED_AT .. why)
end

-- why push would refuse the message of a readable entry now (nil: it may be stored)
local function fq_intake_refusal(q, pc, u, p, body)
  local max_payload = pc.max_payload
  if #body > max_payload then
    return 'payload of ' .. fq_int(#body) .. ' bytes over ' .. fq_int(max_payload)
  end
  local damage = fq_push_probe(q, pc, u, p)
  if damage ~= nil then return 'damaged key ' .. damage end
  if q.lim_on then
    local cap = fq_limits_over_cap(q, u, 1)
    if cap ~= nil then return 'max_queued ' .. fq_int(cap) .. ' reached' end
  end
  return nil
end

-- entries no ingest could read, raw, to intake:bad; back to the intake's head should that
-- key hold another type (never dropped; the claim names the key as repaired)
local function fq_intake_set_aside(q, bad)
  local key = fq_intake_bad_key(q)
  if FQ_TYPE(FQ_PCALL('RPUSH', key, unpack(bad))) == 'table' then
    for k = #bad, 1, -1 do FQ_CALL('LPUSH', fq_intake_key(q), bad[k]) end
    if q.repaired ~= nil then q.repaired[#q.repaired + 1] = key end
  end
end

-- ingest up to `limit` entries from the head of the intake, in order, at q.now. Returns how
-- many were stored, duplicates, rejected (DLQ or intake:bad) and left in the intake; or nil
-- and the damage (fq_damage) when the intake holds another type (nothing done)
local function fq_ingest(q, limit)
  local intake = fq_intake_key(q)
  local got = FQ_PCALL('LRANGE', intake, 0, limit - 1)
  if got['err'] ~= nil then
    return nil, fq_damage(intake, 'list')
  end
  local n = #got
  if n == 0 then return 0, 0, 0, 0 end
  fq_meta(q)
  local now = q.now
  local pc = {checked = {}, had_ready = {}, now_s = fq_int(now), score_p = false,
    score_s = false, max_payload = FQ_TONUMBER(q.argv[7])}
  local stored, dups, rejected = 0, 0, 0
  local bad = nil
  for k = 1, n do
    local e = got[k]
    local id, u, ps, dmss, mlen, at = string.match(e, FQ_INTAKE_HEAD)
    local key = id ~= nil and fq_valid_id(id) and fq_valid_id(u) and fq_task_key(q, id)
    local v = key and FQ_PCALL('HMGET', key, 'st', 'exp', 'u')
    local live = v and v['err'] == nil and v[1] ~= false and not fq_expired(v[2], now)
    if not v or v['err'] ~= nil or (live and v[3] ~= false and v[3] ~= u) then
      -- an id or tenant that does not read, a record key of another type, or an id a live
      -- task of another tenant holds (ADR 60; its handle's get raises TaskIdConflictError):
      -- kept raw
      bad = bad or {}
      bad[#bad + 1] = e
    elseif live then
      fq_bump(q, u, 'duplicates', 1)
      dups = dups + 1
    else
      -- a new id, or a record past its logical expiry (forgotten first, as push does)
      if v[1] ~= false then fq_forget(q, id) end
      local p, dms, ml = FQ_PRIORITY_OF[ps], FQ_TONUMBER(dmss), FQ_TONUMBER(mlen)
      local meta, body, why
      if p == nil or dms == nil or dms > 0 or dms ~= FQ_FLOOR(dms) or at + ml - 1 > #e then
        -- the fields after the tenant do not read: the whole entry is kept as the body
        ps, dmss, meta, body, why = '3', '0', '', e, 'malformed entry'
      else
        meta, body = FQ_SUB(e, at, at + ml - 1), FQ_SUB(e, at + ml)
        why = fq_intake_refusal(q, pc, u, p, body)
      end
      if why == nil then
        fq_push_ready(q, pc, key, id, u, p, ps, dmss, meta, body)
        stored = stored + 1
      else
        fq_intake_reject(q, pc, key, id, u, ps, dmss, meta, body, why)
        rejected = rejected + 1
      end
    end
  end
  FQ_CALL('LPOP', intake, n)
  if bad ~= nil then
    fq_intake_set_aside(q, bad)
    rejected = rejected + #bad
  end
  if stored > 0 then q.counters.pushed = (q.counters.pushed or 0) + stored end
  -- fewer than asked: the intake is empty now (one script: nothing came in meanwhile)
  return stored, dups, rejected, n < limit and 0 or FQ_CALL('LLEN', intake)
end
