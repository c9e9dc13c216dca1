--[[ record: a task's story and the browse indexes (ADR 70; fairque_core/memory/browse.py and
  the store's _attempt_ended are the model).

  Task hash fields written here: sa the start ms of the current attempt (the claim writes it),
  an the number of attempts that ended, a<n> attempt n as
  `outcome|start ms|end ms|#worker|worker` then its failure record (the last
  FQ_REC.attempts kept), en the end ms of a finished or canceled task (a failed one's is
  mv); a finished task's payload in kb (its body when at most FQ_REC.body bytes, else
  the first FQ_REC.preview bytes, with bz its size) and its metadata in km (the finish
  empties b and m).

  Indexes (KeySpace.index): ix:<state> and ix:<state>:<tenant> for the states a task ends in
  (finished, failed, canceled), members task ids scored by the end ms. A finished or canceled
  record lives for the result TTL: the first add of a call to such an index drops what is
  older than that (ZREMRANGEBYSCORE) and, on server time, gives the index key the TTL (an
  index outlives its newest record by nothing). A failed task's entry leaves with its DLQ
  entry (requeue, purge).
]]
--- @include "core"

-- attempts kept, payload bytes kept whole, preview bytes: one table, as the function library
-- holds close to Lua's 200 top-level locals
local FQ_REC = {attempts = 20, body = 1024, preview = 256}

-- the first add of this call to an index of an expiring state trims it and sets its expiry
function FQ_REC.ix_trim(q, state, key)
  if state == 'failed' then return end
  local seen = q.ix_seen
  if seen == nil then
    seen = {}
    q.ix_seen = seen
  end
  if seen[key] then return end
  seen[key] = true
  local ttl = q.result_ttl_ms or fq_header(q, 'result_ttl_ms')
  FQ_CALL('ZREMRANGEBYSCORE', key, '-inf', '(' .. fq_int(q.now - ttl))
  if q.server_time then FQ_CALL('PEXPIRE', key, fq_int(math.max(ttl, 1))) end
end

-- task `id` of tenant u ended in `state` now: into both indexes of that state. With `later`
-- the adds wait in q.ix_later for FQ_REC.ix_flush (one ZADD per index for a batch)
function FQ_REC.ix_add(q, state, u, id, later)
  for _, key in ipairs({fq_ix_key(q, state, nil), fq_ix_key(q, state, u)}) do
    if later then
      local pending = q.ix_later
      if pending == nil then
        pending = {}
        q.ix_later = pending
      end
      local adds = pending[key]
      if adds == nil then
        adds = {}
        pending[key] = adds
        FQ_REC.ix_trim(q, state, key)
      end
      adds[#adds + 1] = fq_int(q.now)
      adds[#adds + 1] = id
    else
      FQ_CALL('ZADD', key, fq_int(q.now), id)
      FQ_REC.ix_trim(q, state, key)
    end
  end
end

-- the adds FQ_REC.ix_add left for later, one ZADD per index (chunked: unpack has a stack limit)
function FQ_REC.ix_flush(q)
  local pending = q.ix_later
  if pending == nil then return end
  q.ix_later = nil
  for key, adds in FQ_NEXT, pending do
    for s = 1, #adds, 1000 do
      FQ_CALL('ZADD', key, unpack(adds, s, math.min(s + 999, #adds)))
    end
  end
end

-- task `id` of tenant u leaves the indexes of `state` (a DLQ entry requeued or purged)
-- (u not a string: unknown, a damaged record's; the tenant's index is left to its owner)
function FQ_REC.ix_drop(q, state, u, id)
  FQ_CALL('ZREM', fq_ix_key(q, state, nil), id)
  if FQ_TYPE(u) == 'string' then FQ_CALL('ZREM', fq_ix_key(q, state, u), id) end
end

-- the attempt of the lease on the task at `key` ends now with `outcome` (and the failure
-- record `err`): kept as a<n>; call before the lease's fields are cleared. `extra`: more
-- field-value pairs for the same HSET (or nil); `v` the record's wk, sa and an when read
function FQ_REC.record_attempt(q, key, outcome, err, extra, v)
  v = v or FQ_CALL('HMGET', key, 'wk', 'sa', 'an')
  local n = (FQ_TONUMBER(v[3]) or 0) + 1
  local worker = v[1] or ''
  local args = extra or {}
  local k = #args
  args[k + 1], args[k + 2] = 'an', fq_int(n)
  args[k + 3] = 'a' .. fq_int(n)
  args[k + 4] = outcome .. '|' .. (v[2] or '0') .. '|' .. fq_int(q.now) .. '|' .. #worker
    .. '|' .. worker .. (err or '')
  FQ_CALL('HSET', key, unpack(args))
  if n > FQ_REC.attempts then
    FQ_CALL('HDEL', key, 'a' .. fq_int(n - FQ_REC.attempts))
  end
end

-- task `id` (tenant u, record at `key`) finishes now: its attempt, its end, its payload kept
-- (short) or previewed, its metadata kept; into the finished indexes. Call before the finish
-- writes the record (it empties b and m)
-- (the index adds wait for FQ_REC.ix_flush, which the finish calls once)
function FQ_REC.record_finish(q, key, id, u)
  local v = FQ_CALL('HMGET', key, 'wk', 'sa', 'an', 'b', 'm')
  local size = v[4] and #v[4] or 0
  local extra = {'en', fq_int(q.now), 'km', v[5] or ''}
  if size > FQ_REC.body then
    extra[5], extra[6] = 'kb', FQ_SUB(v[4], 1, FQ_REC.preview)
    extra[7], extra[8] = 'bz', fq_int(size)
  else
    extra[5], extra[6] = 'kb', v[4] or ''
  end
  FQ_REC.record_attempt(q, key, 'finished', '', extra, v)
  FQ_REC.ix_add(q, 'finished', u, id, true)
end

-- a task canceled now (r: the record as task.lua reads it): its end, into the canceled indexes
function FQ_REC.record_canceled(q, r)
  FQ_CALL('HSET', r.key or fq_task_key(q, r.id), 'en', fq_int(q.now))
  FQ_REC.ix_add(q, 'canceled', r.tenant, r.id)
end

-- the number of attempts of the task at `key` (appended to `out`), and its kept attempts'
-- texts, each `<length>:<text>`, oldest first, in one string (ADR 70)
function FQ_REC.record_texts(key, out)
  local n = FQ_TONUMBER(FQ_CALL('HGET', key, 'an')) or 0
  table.insert(out, fq_int(n))
  if n == 0 then return '' end
  local fields = {}
  for k = math.max(1, n - FQ_REC.attempts + 1), n do fields[#fields + 1] = 'a' .. fq_int(k) end
  local parts = {}
  for _, text in ipairs(FQ_CALL('HMGET', key, unpack(fields))) do
    if text then parts[#parts + 1] = #text .. ':' .. text end
  end
  return table.concat(parts)
end
