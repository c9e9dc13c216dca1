--[[ claim helpers: moving due scheduled tasks and the fair choice of a tenant.

  Mirrors the pure Python module fairque_core/domain/fairness.py (pick and serve; activate,
  deactivate, refund and the tenant's pass are in tenant.lua): keep the two in step. How a
  pick reads the head of the active set is claim_view.lua's: the reference reads it at every
  pick; fast/claim_view.lua (the accelerator `claim_view`, ADR 43) reads it once per claim and
  also reserves the serves that need no pick (fq_reserve_more). The script loader
  (scripting/scripts.py) builds the claim with one or the other.
]]
--- @include "intake"
--- @include "claim_view"
--- @include "expiry"

-- due scheduled tasks (at most the move limit) into their tenants' queues, ready at due time
local function fq_move_due(q)
  local limit = q.move_limit or fq_header(q, 'move_limit')
  if limit <= 0 then return end
  local due = FQ_CALL('ZRANGEBYSCORE', q.delayed, '-inf', fq_int(q.now), 'WITHSCORES',
    'LIMIT', 0, limit)
  for k = 1, #due, 2 do
    local id = due[k]
    FQ_CALL('ZREM', q.delayed, id)
    local v = FQ_CALL('HMGET', fq_task_key(q, id), 'u', 'p', 'seq', 'm')
    -- a damaged hash without its tenant is dropped from `delayed` and left for inspection
    if v[1] ~= false then
      fq_bump(q, v[1], 'scheduled', -1)
      -- past its expiry (ADR 77): to the DLQ as stale, never ready
      if not fq_stale(q, id, v[4]) then
        local r = {
          id = id, tenant = v[1], priority = FQ_TONUMBER(v[2]) or FQ_DEFAULT_PRIORITY,
          seq = FQ_TONUMBER(v[3]) or 0,
        }
        fq_make_ready(q, r, FQ_TONUMBER(due[k + 1]), false)
      end
    end
  end
end

-- tenant u's queue `key` holds another type (damaged behind the client's back): named in the
-- reply (q.repaired) and counted in u's `repaired` once per call, then read as empty
local function fq_queue_damaged(q, u, key)
  if q.checked[key] == nil then
    q.checked[key] = true
    q.repaired[#q.repaired + 1] = key
    fq_bump(q, u, 'repaired', 1)
  end
end

-- the pops of the serves reserved so far (fq_reserve: one LPOP and one ZPOPMIN of the count
-- per tenant), then their leases in the order served (q.lease, fq_claim's). A tenant's
-- `leased` and `claimed` counters are bumped once, by its leases made, after its last
local function fq_claim_flush(q)
  local s = q.serve_n
  if s == 0 then return end
  q.serve_n = 0
  q.popped = q.popped + s
  local serves, cache, lease = q.serves, q.tenant_cache, q.lease
  for k = 1, s do
    local u = serves[k]
    local t = cache[u]
    local c, m = t.pend_c or 0, t.pend_n or 0
    if c + m == 1 then -- served once: its one pop, no cursor (the common case of many tenants)
      local id
      if c == 1 then
        id = FQ_CALL('LPOP', t.critical_key)
      else
        id = FQ_SUB(FQ_CALL('ZPOPMIN', t.normal_key)[1], FQ_SEQ_WIDTH + 1)
      end
      t.pend_c, t.pend_n = nil, nil
      if lease(u, id, false) then fq_bump_lease(q, u, 1, 'claimed', 1) end
    else
      local at = t.pend_at
      if at == nil then
        at = 0
        t.pend_ok = 0
        if c > 0 then t.pend_crit = FQ_CALL('LPOP', t.critical_key, c) end
        if m > 0 then t.pend_norm = FQ_CALL('ZPOPMIN', t.normal_key, m) end
      end
      at = at + 1
      local id
      if at <= c then
        id = t.pend_crit[at]
      else
        id = FQ_SUB(t.pend_norm[2 * (at - c) - 1], FQ_SEQ_WIDTH + 1) -- without its sequence
      end
      if lease(u, id, false) then t.pend_ok = t.pend_ok + 1 end
      if at == c + m then -- u's last reserved task
        if t.pend_ok > 0 then fq_bump_lease(q, u, t.pend_ok, 'claimed', t.pend_ok) end
        t.pend_at, t.pend_c, t.pend_n, t.pend_crit, t.pend_norm = nil, nil, nil, nil, nil
      else
        t.pend_at = at
      end
    end
  end
end

-- a member picked from an active set the first time in this call must be its tenant's own:
-- activation number and tier as in the tenant hash. A tenant hash that is gone is rebuilt
-- from the member (its number, and its score as the pass; weight 1). Any other mismatch (a
-- stale member, a tenant hash of another type) drops the member; a sound tenant with ready
-- work is activated again. Either is counted (`repaired`) and reported (q.repaired).
-- Returns u, or false: pick again
local function fq_check_member(q, u, key, tier, member, score)
  local t = fq_tenant(q, u)
  local act = nil
  if string.byte(member, FQ_SEQ_WIDTH + 1) == FQ_MEMBER_SEP_BYTE then
    act = FQ_TONUMBER(FQ_SUB(member, 1, FQ_SEQ_WIDTH))
  elseif FQ_CALL('ZSCORE', key, member) == false then
    return u -- an old bare member fq_tenant has just rewritten (fq_migrate_member)
  end
  local right_tier = fq_tier_key(q, t) == tier
  if act ~= nil and t.act == act and right_tier and not t.broken then
    t.member, t.member_of = member, act -- fq_place writes it back without formatting it
    return u
  end
  q.repaired[#q.repaired + 1] = u
  fq_bump(q, u, 'repaired', 1)
  if act ~= nil and t.act == nil and not t.broken then
    t.act, t.pass, t.tier = act, FQ_TONUMBER(score), FQ_TONUMBER(tier)
    t.dirty, t.restored = true, true
    q.active_cache[u] = true
    return u
  end
  if q.av ~= nil then fq_av_drop(q) end -- the set changes behind the view
  FQ_CALL('ZREM', key, member)
  if FQ_CALL('ZCARD', key) == 0 then
    FQ_CALL('ZREM', q.tiers, tier)
    q.top_tier = nil
  end
  q.active_cache[u] = nil
  if not t.broken then
    -- the queues are read: the pops reserved so far are made first (fq_claim_flush)
    if q.serve_n ~= nil then fq_claim_flush(q) end
    local c = FQ_PCALL('LLEN', fq_critical_key(q, u))
    local z = FQ_PCALL('ZCARD', fq_normal_key(q, u))
    if (FQ_TYPE(c) == 'number' and c > 0) or (FQ_TYPE(z) == 'number' and z > 0) then
      fq_activate(q, u)
    end
  end
  return false
end

-- the tenant to serve: with no group (nil) the lowest (pass, activation) in the highest active
-- tier (read through the view, see fq_av_head; `want`: its window); else the best active
-- tenant of the first group that has one, by (-tier, pass, activation)
local function fq_pick(q, groups, want)
  if groups == nil then
    -- without strict tiers every tenant is in tier 0. With them the top tier is read once per
    -- call and cached in q.top_tier, which fq_activate and fq_deactivate reset when `tiers`
    -- changes
    local top = '0'
    if q.strict_tiers then
      if q.top_tier == nil then
        local tiers = FQ_CALL('ZREVRANGE', q.tiers, 0, 0)
        q.top_tier = tiers[1] or false
      end
      if not q.top_tier then return nil end
      top = q.top_tier
    end
    local key = fq_active_key(q, top)
    local member, score, u = fq_av_head(q, key, want)
    if not member then return nil end
    if q.checked[member] then return u end
    q.checked[member] = true
    return fq_check_member(q, u, key, top, member, score)
  end
  for _, group in ipairs(groups) do
    local best, best_tier, best_pass, best_act = nil, 0, 0, 0
    for _, u in ipairs(group) do
      if fq_is_active(q, u) then
        local t = fq_tenant(q, u)
        local tier = fq_tier(q, t)
        if best == nil or tier > best_tier
          or (tier == best_tier and (t.pass < best_pass
            or (t.pass == best_pass and t.act < best_act))) then
          best, best_tier, best_pass, best_act = u, tier, t.pass, t.act
        end
      end
    end
    if best ~= nil then return best end
  end
  return nil
end

-- what a serve does after it took (or reserved) u's task: the virtual time of u's tier moves
-- to the tier's lowest pass (u's own unless `pinned`: the claim named its tenants), the pass
-- advances, u stays active when it has work left (`more`) or leaves its active set
local function fq_served(q, u, t, tier, pinned, more)
  q.ready_delta = q.ready_delta - 1
  local lowest = t.pass
  if pinned then
    lowest = FQ_TONUMBER(FQ_CALL('ZRANGE', fq_active_key(q, tier), 0, 0, 'WITHSCORES')[2])
  end
  fq_set_vtime(q, tier, lowest)
  t.pass = t.pass + t.stride
  t.dirty = true
  if more then
    fq_place(q, u, t)
  else
    fq_deactivate(q, u)
  end
end

-- the size left of u's scored set: read once per call (ZCARD), then counted down by the
-- serves (t.normal_left); a key of another type reads as empty, named and counted
local function fq_normal_left(q, u, t)
  local left = t.normal_left
  if left == nil then
    local normal = t.normal_key
    left = FQ_PCALL('ZCARD', normal)
    if FQ_TYPE(left) == 'table' then
      fq_queue_damaged(q, u, normal)
      left = 0
    end
    t.normal_left = left
  end
  return left
end

-- pop the next task of tenant u (critical FIFO first), then fq_served. Within one call nothing
-- but the claim's own pops changes a tenant's queues, so what a serve learnt of them is kept
-- on the tenant record for its next serve in the same call: an empty critical list is not
-- popped again (t.no_critical) and the size of the scored set is counted down instead of read
-- again (t.normal_left). A claim with flow control serves this way (each start may change
-- what the next pick sees); any other reserves (fq_reserve)
local function fq_serve(q, u, pinned)
  local t = fq_tenant(q, u)
  local tier = fq_tier_key(q, t)
  if t.normal_key == nil then t.normal_key = fq_normal_key(q, u) end
  local normal = t.normal_key
  -- pcall: a queue of another type (damaged behind the client's back) fails no claim; an
  -- active tenant with neither queue readable or neither holding work is deactivated and
  -- counted (`repaired`), and the claim picks again (nil)
  local id = false
  local critical_left = false
  local critical -- its key, built when first popped
  if not t.no_critical and q.crit ~= nil and q.crit[u] == true then
    t.no_critical = true -- its list was found empty when the view read it (fq_av_open)
  end
  if not t.no_critical then
    if t.critical_key == nil then t.critical_key = fq_critical_key(q, u) end
    critical = t.critical_key
    id = FQ_PCALL('LPOP', critical)
    if FQ_TYPE(id) == 'table' then
      fq_queue_damaged(q, u, critical)
      id = false
    end
    if id then critical_left = true else t.no_critical = true end
  end
  if not id then
    local popped = FQ_PCALL('ZPOPMIN', normal)
    if popped['err'] ~= nil or popped[1] == nil then
      if popped['err'] ~= nil and q.checked[normal] == nil then
        q.checked[normal] = true
        q.repaired[#q.repaired + 1] = normal
      end
      q.repaired[#q.repaired + 1] = u
      fq_bump(q, u, 'repaired', 1)
      t.normal_left = nil
      fq_deactivate(q, u)
      return nil
    end
    if t.normal_left ~= nil then t.normal_left = t.normal_left - 1 end
    id = FQ_SUB(popped[1], FQ_SEQ_WIDTH + 1) -- the member without its sequence
  end
  -- work left: the critical list first (read only when this serve popped from it), then the
  -- scored set's size (read once per call, see above)
  local more = false
  if critical_left then
    if FQ_CALL('LLEN', critical) > 0 then more = true else t.no_critical = true end
  end
  if not more then more = fq_normal_left(q, u, t) > 0 end
  fq_served(q, u, t, tier, pinned, more)
  return id
end

--[[ A claim without flow control reserves its tasks and pops them later (ADR 52). Each serve
  records its tenant in q.serves (q.serve_n of them) and counts the task it would have popped
  on the tenant record (t.pend_c from the critical list, then t.pend_n from the scored set);
  fq_claim_flush pops each tenant's reserved tasks at once (one LPOP and one ZPOPMIN of the
  count) and leases them in the order served. The picks, the tasks, the tokens and every
  write are those of a pop per serve, because between a serve and the flush nothing reads a
  tenant's queues: a pick reads the active sets and tenant hashes only, and the one reader of
  queues on the way, a repair in fq_check_member, flushes first. A serve learns what the pop
  would have told (was there a task; is work left) from one LLEN and one ZCARD per tenant and
  call, counted down per serve. The pops of a tenant served once cost what they did; a tenant
  served k times pays one pop for its k tasks instead of k.
]]

-- fq_serve without the pop: u's next task is reserved (see above). Returns true, or nil as
-- fq_serve (u had no work to serve: deactivated, counted)
local function fq_reserve(q, u, pinned)
  local t = fq_tenant(q, u)
  local tier = fq_tier_key(q, t)
  if t.normal_key == nil then t.normal_key = fq_normal_key(q, u) end
  if not t.no_critical and q.crit ~= nil and q.crit[u] == true then
    t.no_critical = true -- its list was found empty when the view read it (fq_av_open)
  end
  local critical = false
  if not t.no_critical then
    local c = t.critical_left
    if c == nil then
      local key = t.critical_key
      if key == nil then
        key = fq_critical_key(q, u)
        t.critical_key = key
      end
      c = FQ_PCALL('LLEN', key)
      if FQ_TYPE(c) == 'table' then
        fq_queue_damaged(q, u, key)
        c = 0
      end
    end
    if c > 0 then
      critical = true
      t.critical_left = c - 1
      t.pend_c = (t.pend_c or 0) + 1
    else
      t.no_critical = true
    end
  end
  if not critical then
    -- the pop's answer: a task, none (an active tenant without work) or a damaged set
    local left = t.normal_left
    if left == nil then
      local normal = t.normal_key
      left = FQ_PCALL('ZCARD', normal)
      if FQ_TYPE(left) == 'table' then
        if q.checked[normal] == nil then
          q.checked[normal] = true
          q.repaired[#q.repaired + 1] = normal
        end
        left = 0
      end
    end
    if left == 0 then
      q.repaired[#q.repaired + 1] = u
      fq_bump(q, u, 'repaired', 1)
      t.normal_left = nil
      fq_deactivate(q, u)
      return nil
    end
    t.normal_left = left - 1
    t.pend_n = (t.pend_n or 0) + 1
  end
  local s = q.serve_n + 1
  q.serve_n = s
  q.serves[s] = u
  local more = false
  if critical then
    if t.critical_left > 0 then more = true else t.no_critical = true end
  end
  if not more then more = fq_normal_left(q, u, t) > 0 end
  fq_served(q, u, t, tier, pinned, more)
  return true
end

-- whether the head of sorted set `key` (delayed, parked) is due at `now`; true too when it
-- cannot be read (another type: the full claim then refuses it typed)
local function fq_head_due(key, now)
  local head = FQ_PCALL('ZRANGE', key, 0, 0, 'WITHSCORES')
  if FQ_TYPE(head) ~= 'table' or head['err'] ~= nil then return true end
  if head[1] == nil then return false end
  local due = FQ_TONUMBER(head[2])
  return due == nil or due <= now
end

-- whether a claim on the queue of `keys` at `now` has nothing to do (ADR 59): no tier has an
-- active tenant, the intake is empty, and neither a delayed task nor a parked tenant is due.
-- Such a claim leases, moves and writes nothing, so it returns before the queue is opened and
-- checked. Read with pcall: a key of another type answers false, and the full claim then
-- raises its typed error as before
local function fq_claim_idle(keys, now)
  if FQ_PCALL('ZCARD', keys[3]) ~= 0 then return false end
  local q = {prefix = fq_prefix(keys[1])} -- what the key builders read of a queue
  return FQ_PCALL('LLEN', fq_intake_key(q)) == 0 and not fq_head_due(keys[4], now)
    and not fq_head_due(fq_parked_key(q), now)
end

-- lease up to `count` ready tasks, fairly, on the open queue `q` (claim.lua and the claim part
-- of finish_claim.lua), after ingesting up to FQ_INTAKE_CLAIM_LIMIT entries of the intake
-- (intake.lua; whatever `count`, paused or not). Its arguments are read from argv from `at` on: worker id, lease ms,
-- count, 1 = groups follow, 0 = all, then (groups) A, A assigned tenant ids, S, S steal
-- tenant ids, then `count` lease tokens (the i-th claimed task gets the i-th token).
-- Returns claim.lua's reply: {now_ms, n, then per claimed task: id, tenant, priority, retry
-- count, meta, body, recoveries, then the tenants and task keys it repaired}. Raises the wake
-- signal (q.wake) when it claimed or ingested and ready tasks remain, or entries remain in the
-- intake; fq_close writes everything back
local function fq_claim(q, argv, at)
  -- checked: active-set members checked in this call (fq_pick); repaired: what was
  q.checked, q.repaired = {}, {}
  local worker = argv[at]
  local lease_ms = FQ_TONUMBER(argv[at + 1])
  local count = FQ_TONUMBER(argv[at + 2])
  local groups = nil
  local i = at + 4
  if argv[at + 3] == '1' then
    groups = {}
    for g = 1, 2 do
      local members = {}
      local n = FQ_TONUMBER(argv[i])
      for k = 1, n do members[k] = argv[i + k] end
      i = i + 1 + n
      groups[g] = members
    end
  end
  local tokens_at = i

  -- the intake first (ADR 47): what producers appended is pushed now, before anything moves
  -- or is picked. Its wake is decided below, with the claim's
  local wake = q.wake
  local ingested, _, _, left = fq_ingest(q, FQ_INTAKE_CLAIM_LIMIT)
  if ingested == nil then
    q.repaired[#q.repaired + 1] = fq_intake_key(q) -- another type: left for the doctor
    ingested, left = 0, 0
  elseif ingested > 0 then
    q.wake = wake
    -- push's shortcut may have marked a paused tenant that had ready work active: the claim
    -- asks the active sets again
    q.active_cache = {}
  end
  fq_move_due(q)
  -- flow control (_include/limits.lua): parked tenants due again, then per start the
  -- queue-wide limits, the tenant's rate and cap
  local limited = fq_limits_on(q)
  -- limits by key (keylimits.lua, ADR 79): meta `klim` (read with the meta fields) while a
  -- key has limits; then the scopes of the tasks leased, each once, in order (q.kstarted)
  local klim = q.klim
  if limited or klim then fq_unpark_due(q) end
  -- a paused queue (pause.lua; meta `pau`, read with the meta fields) leases nothing
  if q.paused then count = 0 end
  local out = {q.now, 0}
  local deadline = fq_int(q.now + lease_ms)
  local started = fq_int(q.now) -- sa: the attempt's start (record.lua)
  -- tenants read from now on are read lean (fq_tenant) when neither limits nor strict tiers
  -- are in use
  q.lean_tenants = not limited and not q.strict_tiers
  local n = 0
  local leases = {} -- deadline, id, ...: one ZADD for the batch below
  local stale = {} -- the tenants of the tasks found past their expiry, in the order found
  -- lease task `id` of tenant u (served from its queue) with the next token; false when its
  -- key is of another type (damaged behind the client's back): nothing to lease, the id has
  -- left the queue, counted. `bump`: count it in u's `leased` and `claimed` now (a claim
  -- that reserves counts a tenant's leases once, fq_claim_flush)
  if klim then q.kseen, q.kstarted = {}, {} end
  local function lease(u, id, bump)
    local key = fq_task_key(q, id)
    -- the fields the reply carries, read first: a task past its expiry is not leased but
    -- dead-lettered (fq_stale, ADR 77), its tenant's turn given back when the claim ends
    local v = FQ_PCALL('HMGET', key, 'p', 'rc', 'm', 'b', 'rec')
    if v['err'] == nil and fq_stale(q, id, v[3]) then
      stale[#stale + 1] = u
      return false
    end
    -- a task whose limit key holds it is parked, its tenant's turn given back (ADR 79); one
    -- that starts is counted in its key's scope, which its lease's `lc` names
    local lc = limited and '1' or nil
    if klim and v['err'] == nil then
      local k = FQ_KEYLIM.key_of(v[3])
      if k then
        local ok, scope = FQ_KEYLIM.admit(q, id, u, k)
        if not ok then
          stale[#stale + 1] = u
          return false
        end
        if scope then
          lc = scope
          if not q.kseen[scope] then
            q.kseen[scope] = true
            q.kstarted[#q.kstarted + 1] = scope
          end
        end
      end
    end
    -- cdl: the claim's deadline; a lease that expires still at it never started (refund)
    -- lc: a lease of a queue with limits (its end looks at the tenant's cap): '1', or the
    -- limit key scope it is counted in (its end gives the slot back, ADR 79). Written only
    -- with limits (until meta `lim` or `klim` is set no lease ever had it); a lease end
    -- turns a scope back into '1', and readers test for its presence
    local set
    if lc then
      set = FQ_PCALL('HSET', key, 'st', 'started', 'tok', argv[tokens_at + n],
        'wk', worker, 'dl', deadline, 'cdl', deadline, 'lc', lc, 'sa', started)
    else
      set = FQ_PCALL('HSET', key, 'st', 'started', 'tok', argv[tokens_at + n],
        'wk', worker, 'dl', deadline, 'cdl', deadline, 'sa', started)
    end
    if FQ_TYPE(set) == 'table' then
      q.repaired[#q.repaired + 1] = key
      fq_bump(q, u, 'repaired', 1)
      return false
    end
    n = n + 1
    leases[2 * n - 1] = deadline
    leases[2 * n] = id
    if bump then
      fq_bump(q, u, 'leased', 1)
      fq_bump(q, u, 'claimed', 1)
    end
    if limited then
      fq_limits_after_start(q, u)
      fq_queue_started(q)
    end
    local o = 7 * n - 5 -- out holds now_ms, n and 7 values per lease made before this one
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, u, v[1], v[2]
    out[o + 5], out[o + 6], out[o + 7] = v[3], v[4], v[5]
    return true
  end

  -- false from fq_pick: a damaged member was dropped; nil from a serve: a damaged tenant was
  -- deactivated. Either way the loop picks again (each repair removes what was picked), as
  -- after a lease refused by a damaged task key
  local pinned = groups ~= nil
  -- the claim pops at most `cap` tasks (ADR 77): stale ones beyond that wait for the next
  -- claim (the wake signal below passes it on). q.popped: the pops made (the reserved ones
  -- once flushed, fq_claim_flush)
  local cap = count + FQ_STALE_CLAIM_LIMIT
  q.popped = 0
  if limited or count == 1 then -- (a claim of one has nothing to pop at once)
    while n < count and q.popped < cap do
      if limited and not fq_queue_may_start(q, n) then break end
      local u = fq_pick(q, groups, count - n + 1)
      if u == nil then break end
      local id = u and fq_serve(q, u, pinned)
      if id then
        q.popped = q.popped + 1
        lease(u, id, true)
      end
    end
  else
    -- reserved, popped and leased by fq_claim_flush: when the reserved tasks would fill the
    -- claim or its pops, and at the end
    q.serves, q.serve_n, q.lease = {}, 0, lease
    while n < count and q.popped + q.serve_n < cap do
      local u = fq_pick(q, groups, count - n - q.serve_n + 1)
      if u == nil then break end
      if u and fq_reserve(q, u, pinned) and not pinned and n + q.serve_n < count then
        local more = math.min(count - n - q.serve_n, cap - q.popped - q.serve_n)
        if more > 0 then fq_reserve_more(q, u, more) end
      end
      if n + q.serve_n >= count or q.popped + q.serve_n >= cap then fq_claim_flush(q) end
    end
    fq_claim_flush(q)
  end
  fq_av_drop(q) -- the passes the view changed go back to the set
  -- a stale task took no turn (ADR 77): its tenant's pass goes back, once the picks are done
  for _, u in ipairs(stale) do fq_refund(q, u) end
  -- a scope a start left with room puts one parked task back (key_limits.settle)
  if klim then
    for _, scope in ipairs(q.kstarted) do FQ_KEYLIM.settle(q, scope) end
  end
  out[2] = n
  for _, what in ipairs(q.repaired) do table.insert(out, what) end
  for s = 1, #leases, FQ_ZADD_CHUNK do
    FQ_CALL('ZADD', q.leases, unpack(leases, s, math.min(s + FQ_ZADD_CHUNK - 1, #leases)))
  end
  -- ready work left behind by a claim that leased, ingested or dead-lettered stale tasks, or
  -- entries left in the intake: pass the wake signal on to the next idle worker
  if n > 0 or ingested > 0 or #stale > 0 then
    fq_meta(q)
    if q.ready_base + q.ready_delta > 0 then q.wake = true end
  end
  if left > 0 then q.wake = true end
  return out
end
