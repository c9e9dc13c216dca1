#!lua
--[[ push: store N messages in one call, idempotent by task id (InMemoryBackend.push_batch).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> waits:<id> children:<id> c:<tenant> n:<tenant> tenant:<t> ts:<t>
  tenants (a tenant's first stored message enters it, scored by now; see fq_close); an id
  whose record is past its logical expiry is stored anew after its keys are deleted
  (fq_forget: task, waits, children, done:<id> and its XCom values xcom:<tenant>:<id>)
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8]  number of messages N
  then per message: id, tenant, priority (1-6), delay ms, meta (opaque), body, unique key ('' =
  none), unique window ms, D, D parent ids
  Refuses the call (FQ_E_ID_TAKEN <id>, nothing written) when a message's id is held by a
  live task of another tenant, or named twice in the call for two tenants (ADR 60).
  Returns: array of N entries, 1 = stored, 0 = known id (duplicate), or the id of the task that
           holds the message's unique key (a unique duplicate: nothing stored). The key
           uniq:<tenant>:<key> holds `<id>` while that task lives, `<id>|<until ms>` for its
           window after it ended (fq_ended); a holder whose record is gone holds nothing.
  Errors: FQ_E_BAD_ID, FQ_E_BAD_ARG, FQ_E_TOO_LARGE <size> <limit>, FQ_E_UNKNOWN_DEP <id>,
  FQ_E_QUEUE_FULL <cap> <tenant> (max_queued; the refusal is counted, nothing else written),
  FQ_E_DAMAGED <key> <type> <wanted> (a key it would write holds another type)
  Every dependency must name a live task of the same tenant or one of it earlier in the batch
  (another tenant's task reads as unknown, ADR 63); all messages are checked
  (and the keys they will write, by type) before the first write, so a refused batch changes
  nothing.
]]
--- @include "_include/pushing"

-- meta: read now (fq_meta, as the push reads it anyway) and so type-checked; every other
-- queue-wide key the push may write is checked here too, before anything is read, but the
-- sched list: checked only when this call may raise its signal (see below the checks)
local q = fq_open(KEYS, ARGV, {meta = true, sched = false})
local n = FQ_TONUMBER(ARGV[8])
local now = q.now
local max_payload = FQ_TONUMBER(ARGV[7]) -- the header's max payload bytes

-- check everything before the first write; at[k] is where message k starts in ARGV; state[k]
-- the HMGET st, exp of its task key (read here, so that a damaged one refuses the call whole)
local at = {}
local state = {}
-- seen[id]: id is in this call (true); 1 once the store loop below wrote it (a second message
-- of that id is then a duplicate)
local seen = {}
-- owners[id]: the tenant of the first message of id in this call
local owners = {}
-- the call's push state (see _include/pushing.lua): the keys and tenant ids checked, the
-- tenants that had ready work, the formatted clock, the last score
local checked = {}
-- (every field set here: a field added later would grow the table during the call)
local pc = {checked = checked, had_ready = {}, now_s = fq_int(now), score_p = false,
  score_s = false}
-- every message is ready now, without dependencies (the signal below is never raised)
local plain = true
local i = 9
for k = 1, n do
  local id, u, ps, dmss, body = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 5]
  local nds, uws = ARGV[i + 8], ARGV[i + 7]
  local p = FQ_PRIORITY_OF[ps]
  local dms = FQ_TONUMBER(dmss)
  local nd = FQ_TONUMBER(nds)
  local uk, uw = ARGV[i + 6], FQ_TONUMBER(uws)
  if not fq_valid_id(id) then return fq_err('BAD_ID', 'task_id') end
  if uk ~= '' and not fq_valid_id(uk) then return fq_err('BAD_ID', 'unique_key') end
  if uw ~= 0 and (uw == nil or uw < 0 or uw ~= FQ_FLOOR(uw)) then
    return fq_err('BAD_ARG', 'unique_window')
  end
  -- a tenant id checked once per call (checked[u]: a key always holds the hash tag's '{',
  -- outside the id grammar, so no id is ever a key of `checked`)
  if not checked[u] then
    if not fq_valid_id(u) then return fq_err('BAD_ID', 'tenant') end
    checked[u] = true
  end
  if p == nil then
    -- not a priority as the client spells it: the checks say why
    p = FQ_TONUMBER(ps)
    if p == nil or p < 1 or p > FQ_CRITICAL_PRIORITY or p ~= FQ_FLOOR(p) then
      return fq_err('BAD_ARG', 'priority')
    end
    return fq_err('BAD_ARG', 'priority or delay') -- a priority, spelled otherwise
  end
  if dms ~= 0 then
    if dms == nil or dms ~= FQ_FLOOR(dms) then
      return fq_err('BAD_ARG', 'priority or delay')
    end
    if dms > 0 then plain = false end
  end
  if nd ~= 0 then plain = false end
  if #body > max_payload then
    return fq_err('TOO_LARGE', fq_int(#body) .. ' ' .. fq_int(max_payload))
  end
  for d = 1, nd do
    local dep = ARGV[i + 8 + d]
    if not fq_valid_id(dep) then return fq_err('BAD_ID', 'depends_on') end
    -- a dependency names a task of the same tenant (ADR 63): earlier in this call, or live;
    -- another tenant's task reads exactly as an unknown one
    local dep_owner = owners[dep]
    if dep_owner == nil then
      local parent = fq_rec(q, dep)
      dep_owner = parent and parent.tenant
    end
    if dep_owner ~= u then return fq_err('UNKNOWN_DEP', dep) end
    fq_probe(fq_children_key(q, dep), 'LLEN', 'list')
  end
  local key = fq_task_key(q, id)
  local v = FQ_PCALL('HMGET', key, 'st', 'exp', 'u')
  if v['err'] ~= nil then fq_check_type(key, 'hash') end
  -- a task id belongs to its tenant while its task lives (ADR 60): another tenant's push of
  -- it, or a second message of it for another tenant in this call, refuses the call
  local owner = owners[id]
  if owner == nil and v[1] ~= false and v[3] ~= false and not fq_expired(v[2], now) then
    owner = v[3]
  end
  if owner ~= nil and owner ~= u then return fq_err('ID_TAKEN', id) end
  owners[id] = u
  state[k] = v
  if uk ~= '' then
    fq_probe(fq_unique_key(q, u, uk), 'GET', 'string')
  end
  -- the tenant's queue for this priority and its hash
  local damage = fq_push_probe(q, pc, u, p)
  if damage ~= nil then return fq_err('DAMAGED', damage) end
  seen[id] = true
  at[k] = i
  i = i + FQ_MESSAGE_FIELDS + nd
end

-- the schedule signal is raised only by a delayed or dependent message (fq_schedule) or a
-- limit parking a tenant: then the sched list is checked too, still before the first write
if not plain or q.lim_on then q.sched_len = fq_list_len(fq_sched_key(q)) end

-- the stats hash is checked by fq_open; the counts are written by fq_close

-- max_queued (flow control, _include/limits.lua): a push over a tenant's cap is refused whole
local full = q.lim_on and fq_limits_check_push(q, ARGV, at, n) or nil
if full ~= nil then return full end


-- the messages stored (counted per tenant as they are stored: fq_push_number)
local now_s = pc.now_s
local stored = 0
local out = {}

for k = 1, n do
  i = at[k]
  local id, u = ARGV[i], ARGV[i + 1]
  -- an id twice in one call: the first stores it, the second is a duplicate
  local v = state[k]
  if seen[id] == 1 then v = {'queued', false} end
  local expired = v[1] ~= false and fq_expired(v[2], now)
  local uk, uw = ARGV[i + 6], ARGV[i + 7]
  local ukey, holder = '', nil
  if uk ~= '' then
    ukey = fq_unique_key(q, u, uk)
    holder = fq_unique_holder(q, ukey, now)
  end
  if v[1] ~= false and not expired then
    fq_bump(q, u, 'duplicates', 1)
    out[k] = 0
  elseif holder ~= nil then
    fq_bump(q, u, 'duplicates', 1)
    out[k] = holder
  else
    seen[id] = 1
    if expired then fq_forget(q, id) end
    local key = fq_task_key(q, id)
    local ps, dmss, nds = ARGV[i + 2], ARGV[i + 3], ARGV[i + 8]
    -- checked above: a priority as the client spells it, integers
    local p = FQ_PRIORITY_OF[ps]
    local dms = FQ_TONUMBER(dmss)
    local nd = FQ_TONUMBER(nds)
    if ukey ~= '' then
      FQ_CALL('SET', ukey, id)
      FQ_CALL('HSET', key, 'uk', ukey, 'uw', uw)
    end
    stored = stored + 1
    if nd == 0 and dms <= 0 then
      -- the common case, ready now: one HSET, then into the tenant's queue
      fq_push_ready(q, pc, key, id, u, p, ps, dmss, ARGV[i + 4], ARGV[i + 5])
    else
      local seq = fq_push_number(q, u)
      local due = now + math.max(0, dms)
      local r = {
        id = id, tenant = u, priority = p, seq = seq, due_ms = due, delay_ms = dms,
        state = 'queued', unique_key = ukey, unique_window = FQ_TONUMBER(uw),
      }
      local failed_parent = nil
      local waiting = false
      for d = 1, nd do
        local dep = ARGV[i + 8 + d]
        local parent = fq_rec(q, dep)
        if parent ~= nil then
          if parent.state == 'failed' or parent.state == 'canceled' then
            failed_parent = dep
          elseif parent.state ~= 'finished' then
            FQ_CALL('SADD', fq_waits_key(q, id), dep)
            FQ_CALL('RPUSH', fq_children_key(q, dep), id)
            waiting = true
          end
        end
      end
      local ready_now = failed_parent == nil and not waiting and due <= now
      local seq_s = fq_int(seq)
      q.seq_s = seq_s
      FQ_CALL('HSET', key, 'u', u, 'p', ps, 'b', ARGV[i + 5], 'm', ARGV[i + 4], 'rc', '0',
        'seq', seq_s, 'st', 'queued', 'rd', ready_now and now_s or '0',
        'due', fq_int(due), 'dms', dmss, 'rec', '0')
      if ready_now then
        fq_enqueue(q, r, now, false)
      elseif failed_parent ~= nil then
        FQ_CALL('HSET', key, 'st', 'canceled', 'rs', 'dependency ' .. failed_parent .. ' did not finish')
        fq_bump(q, u, 'canceled', 1)
        fq_event_task(q, 'canceled', id, u, '', 'dependency ' .. failed_parent .. ' did not finish')
        fq_close_record(q, r)
      elseif waiting then
        FQ_CALL('HSET', key, 'st', 'deferred')
      else
        fq_schedule(q, r, due)
      end
    end
    out[k] = 1
  end
end
if stored > 0 then
  q.counters.pushed = (q.counters.pushed or 0) + stored
end
fq_close(q)
return out
