--[[ core: the queue context every script opens, integer formatting, time, counters.

  The context `q` carries the anchor keys (KEYS[1..6]), the key prefix derived from the anchor
  (q.prefix, see keys.lua), the common ARGV header (ARGV[1..7]) and write-back caches that
  fq_close flushes once (q.wake: raise the queue's wake signal; q.resched: raise its schedule
  signal; a tenant's first `pushed` enters it in the derived key tenants; see fq_close):
    ARGV[1] now_ms ('' = server TIME)   ARGV[2] strict tiers (0|1)   ARGV[3] aging horizon ms
    ARGV[4] result TTL ms               ARGV[5] max recoveries       ARGV[6] delayed move limit
    ARGV[7] max payload bytes
  ARGV[2]'s flag is followed by the queue's events cap (`010000`; the flag alone: no events;
  _include/events.lua reads it, ADR 71).
  Numbers are integers held in Lua doubles (exact below 2^53); they are always written to
  Redis through fq_int, never tostring (which would print 1e+15 style floats).
]]
--- @include "keys"

-- priorities (fairque_core Priority): 1-5 are scored with aging, weight(p) = p / 5; CRITICAL
-- goes to the tenant's FIFO; a damaged record's priority reads as NORMAL
local FQ_CRITICAL_PRIORITY = 6
local FQ_DEFAULT_PRIORITY = 3
-- digits of the zero-padded push sequence that starts a scored-set member (scoring.SEQ_WIDTH)
local FQ_SEQ_WIDTH = 16
local FQ_SEQ_FORMAT = '%0' .. FQ_SEQ_WIDTH .. 'd'
-- values (score, member or deadline, id, ...) per ZADD: unpack has a stack limit
local FQ_ZADD_CHUNK = 1000
-- server TIME is seconds and microseconds
local FQ_US_PER_MS = 1000

-- fq_int of the small numbers most writes carry (HINCRBY by 1 and -1 above all), unformatted
local FQ_SMALL_INTS = {[-1] = '-1', [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}

local function fq_int(n)
  return FQ_SMALL_INTS[n] or FQ_FORMAT('%d', n)
end

local function fq_err(code, detail)
  return redis.error_reply('FQ_E_' .. code .. ' ' .. (detail or ''))
end

-- TIME's two decimal strings are read by Lua's own string-to-number coercion (arithmetic on
-- a numeric string): no tonumber or math.floor call, the same integer
local function fq_now(arg)
  if arg ~= nil and arg ~= '' then
    return FQ_TONUMBER(arg)
  end
  local t = FQ_CALL('TIME')
  local us = t[2] + 0
  return t[1] * 1000 + (us - us % FQ_US_PER_MS) / FQ_US_PER_MS
end

-- fails the script with FQ_E_DAMAGED <key> <type> <wanted> when `key` holds another type
-- than `want` (absent is fine)
local function fq_check_type(key, want)
  local got = FQ_CALL('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    error(fq_err('DAMAGED', key .. ' ' .. got .. ' ' .. want))
  end
end

-- the length of list `key` (a signal list: wake, sched), failing the call typed when it holds
-- another type; fq_close raises the signal from this figure without reading it again
local function fq_list_len(key)
  local n = FQ_PCALL('LLEN', key)
  if FQ_TYPE(n) == 'table' then
    fq_check_type(key, 'list')
    error(n)
  end
  return n
end

-- the meta field of the fq_meta read `v` that is not a number: FQ_E_DAMAGED, its detail
-- `<key> TAB <found> TAB <wanted>` (tab-separated: the found value may hold spaces)
local FQ_META_COUNTERS = {'vtime', 'seq', 'ready', 'act'}
local function fq_meta_damaged(q, v)
  for k, name in ipairs(FQ_META_COUNTERS) do
    if v[k] and FQ_TONUMBER(v[k]) == nil then
      error(fq_err('DAMAGED', q.meta .. '\thash whose ' .. name .. ' is ' ..
        FQ_FORMAT('%q', (string.gsub(FQ_SUB(v[k], 1, 40), '%c', '?'))) .. ' (not a number)\thash whose ' ..
        name .. ' is an integer'))
    end
  end
end

-- the queue's meta fields (virtual time, push sequence, ready gauge, activation sequence, the
-- flow-control state and the pause flag), read once per call (at fq_open when the script asks
-- for it: see fq_check_queue)
local function fq_meta(q)
  if q.seq == nil then
    -- pcall: a wrong-type meta fails the call typed (this read is its type check when
    -- fq_open reads it first, see fq_check_queue)
    local v = FQ_PCALL('HMGET', q.meta, 'vtime', 'seq', 'ready', 'act', 'lim', 'lim:q',
      'qtat', 'qhold', 'pau', 'klim')
    if v['err'] ~= nil then
      fq_check_type(q.meta, 'hash')
      error(v)
    end
    q.vtime = FQ_TONUMBER(v[1] or '0')
    q.seq = FQ_TONUMBER(v[2] or '0')
    q.ready_base = FQ_TONUMBER(v[3] or '0')
    q.act = FQ_TONUMBER(v[4] or '0')
    -- a counter that is not a number (`HSET meta ready lots`) refuses the call typed, before
    -- any write (fq_open reads meta first): no arithmetic on nil half-way through the writes
    if q.ready_base == nil or q.seq == nil or q.vtime == nil or q.act == nil then
      fq_meta_damaged(q, v)
    end
    -- flow control (limits.lua): any limit ever set, the queue-wide record, its GCRA state
    q.lim_on = v[5] == '1'
    q.qlim = v[6] or ''
    q.qtat = FQ_TONUMBER(v[7] or '0')
    q.qhold = FQ_TONUMBER(v[8] or '0')
    -- pause.lua: a paused queue leases nothing (claim.lua)
    q.paused = v[9] == '1'
    -- keylimits.lua: some limit key has limits (ADR 79)
    q.klim = v[10] == '1'
  end
end

-- the queue-wide keys a script may write must hold their own type (or be absent): checked
-- before the first write, so that a key damaged behind the client's back (an operator's SET
-- on it) fails the call whole and typed, never half-way through its writes. One ZINTERCARD
-- covers the six sorted sets (it refuses a key of another type before reading any; the
-- smallest input bounds its work, usually `tiers` or an absent key), one call each the rest.
-- `how` (fq_open's third argument, nil = everything):
--   read = true     a script that writes nothing checks nothing
--   meta = true     read the meta fields now (fq_meta, which the script reads anyway): now
--                   done for every checking call (see below), the flag names the intent
--   sched = false   the script raises no schedule signal on this call, so the sched list is
--                   not checked (fq_close reads and checks it, late, should it be raised)
--   later = true    check nothing now (q.checks_due): the script calls fq_check_queue
--                   itself before its first write, once it knows what it writes (finish.lua:
--                   the finish's include checks only what a finish of common tasks writes)
-- The wake and sched lengths read here are kept (q.wake_len, q.sched_len) for fq_close, so a
-- script that raises a signal pays nothing for its check
local FQ_CHECK_ALL = {}
-- fq_close's loop over the tenant records read, when the call read none (never written)
local FQ_NO_TENANTS = {}

-- the six queue-wide sorted sets and active:0 (every tenant's active set without strict
-- tiers: written by any call that activates, deactivates or rescores a tenant), in one
-- ZINTERCARD (see fq_check_queue): seven keys cost what six did
local function fq_check_zsets(q)
  local zsets = FQ_PCALL('ZINTERCARD', 7, q.tiers, q.delayed, q.leases, q.dlq,
    fq_tenants_key(q), fq_parked_key(q), fq_active_key(q, '0'), 'LIMIT', 1)
  if FQ_TYPE(zsets) == 'table' then
    for _, key in ipairs({q.tiers, q.delayed, q.leases, q.dlq, fq_tenants_key(q),
      fq_parked_key(q), fq_active_key(q, '0')}) do fq_check_type(key, 'zset') end
  end
end

local function fq_check_queue(q, how)
  how = how or FQ_CHECK_ALL
  if how.read then return end
  if how.later then
    q.checks_due = true
    return
  end
  q.checks_due = nil
  fq_check_zsets(q)
  -- meta's fields are read now, whatever `how.meta` says: the read is meta's type check and
  -- checks its counters are numbers (fq_meta), before the first write of any call that may
  -- move the ready gauge, the virtual time or the sequences (an HLEN checked the type only,
  -- and a counter that was not a number failed such a call after its writes)
  fq_meta(q)
  if FQ_TYPE(FQ_PCALL('HLEN', q.stats)) == 'table' then fq_check_type(q.stats, 'hash') end
  q.wake_len = fq_list_len(fq_wake_key(q))
  if how.sched ~= false then
    q.sched_len = fq_list_len(fq_sched_key(q))
  end
end

-- `how`: which checks this script needs (see fq_check_queue; nil = all). The context holds
-- only what every call needs; the rest starts nil and is set on first use (a table field
-- costs the same whether it holds nil, false or a value, so a false flag is left nil):
--   seq, vtime, act (fq_meta); top_tier (claim.lua: cached top tier); first_due (task.lua,
--   scheduling); resched, wake, meta_dirty (flags, see fq_close); tier_vtimes:
--   strict mode's virtual time per tier read or set so far (tier string -> number), those
--   in tier_vtimes_changed written back by fq_close
local function fq_open(keys, argv, how, now_ms)
  local now = argv[1]
  local q = {
    prefix = fq_prefix(keys[1]),
    meta = keys[1], stats = keys[2], tiers = keys[3],
    delayed = keys[4], leases = keys[5], dlq = keys[6],
    now = now_ms or fq_now(now),
    server_time = now == nil or now == '',
    strict_tiers = FQ_SUB(argv[2], 1, 1) == '1',
    horizon_ms = FQ_TONUMBER(argv[3]),
    -- the header's other numbers are parsed by their first use (fq_header; push reads max
    -- payload itself): few scripts read them
    argv = argv,
    -- counters: queue counter deltas; tenant_counters: per tenant counter and gauge deltas;
    -- active_cache: tenant -> in its active set; tenant_cache (tenant records read,
    -- tenant.lua) is made by the first read
    counters = {}, tenant_counters = {}, active_cache = {},
    -- ready_delta: change of the queue's ready gauge in this call; ready_base: its stored value
    ready_delta = 0, ready_base = 0,
  }
  fq_check_queue(q, how)
  return q
end

-- ARGV[4] result TTL ms, ARGV[5] max recoveries, ARGV[6] delayed move limit: each parsed on
-- its first use and kept in q under its name (read them as `q.result_ttl_ms or
-- fq_header(q, 'result_ttl_ms')`: after the first read, no call)
local FQ_HEADER_AT = {result_ttl_ms = 4, max_recoveries = 5, move_limit = 6}

local function fq_header(q, name)
  local v = FQ_TONUMBER(q.argv[FQ_HEADER_AT[name]])
  q[name] = v
  return v
end

-- count `name` (a queue counter or a tenant gauge) for tenant u, flushed by fq_close
local function fq_bump(q, u, name, by)
  by = by or 1
  local t = q.tenant_counters[u]
  if t == nil then
    t = {}
    q.tenant_counters[u] = t
  end
  t[name] = (t[name] or 0) + by
  if name ~= 'scheduled' and name ~= 'leased' then
    q.counters[name] = (q.counters[name] or 0) + by
  end
end

-- fq_bump of a lease's start or end for tenant u: its `leased` gauge by `by` and the counter
-- `name` (claimed, finished) by `n`, in one step (a tenant's first figures made with room for
-- both)
local function fq_bump_lease(q, u, by, name, n)
  local t = q.tenant_counters[u]
  if t == nil then
    q.tenant_counters[u] = {leased = by, [name] = n}
  else
    t.leased = (t.leased or 0) + by
    t[name] = (t[name] or 0) + n
  end
  q.counters[name] = (q.counters[name] or 0) + n
end

-- the virtual time of `tier` (a decimal string; FairState.virtual_time): the `vtime` field
-- without strict tiers, else `vtime:<tier>`, which reads as `vtime` until the tier is served
local function fq_vtime(q, tier)
  fq_meta(q)
  if not q.strict_tiers then return q.vtime end
  local vtimes = q.tier_vtimes
  if vtimes == nil then
    vtimes = {}
    q.tier_vtimes = vtimes
  end
  local v = vtimes[tier]
  if v == nil then
    v = FQ_TONUMBER(FQ_CALL('HGET', q.meta, 'vtime:' .. tier) or q.vtime)
    vtimes[tier] = v
  end
  return v
end

local function fq_set_vtime(q, tier, v)
  fq_meta(q)
  if q.strict_tiers then
    if q.tier_vtimes == nil then q.tier_vtimes = {} end
    q.tier_vtimes[tier] = v
    if q.tier_vtimes_changed == nil then q.tier_vtimes_changed = {} end
    q.tier_vtimes_changed[tier] = true
  else
    q.vtime = v
  end
  q.meta_dirty = true
end

-- the next number of the queue's activation sequence (the tie-break of equal passes)
local function fq_next_act(q)
  fq_meta(q)
  q.act = q.act + 1
  q.meta_dirty = true
  return q.act
end

-- (push.lua inlines it and keeps the figure formatted, q.seq_s, for fq_close's write)
local function fq_next_seq(q)
  fq_meta(q)
  q.seq = q.seq + 1
  q.seq_s = nil
  q.meta_dirty = true
  return q.seq
end

-- the logical expiry `exp` of a record (false = none) has passed; a damaged value counts as
-- passed (only closed records carry one)
local function fq_expired(exp, now)
  if exp == false then return false end
  local ms = FQ_TONUMBER(exp)
  return ms == nil or ms <= now
end

-- static score of a priority 1-5 task (scoring.static_score)
local function fq_score(prio, ready_ms, horizon_ms)
  return ready_ms - FQ_FLOOR(prio * horizon_ms / 5)
end

-- scored-set member: 16-digit sequence then id (scoring.seq_member)
local function fq_member(seq, id)
  return FQ_FORMAT(FQ_SEQ_FORMAT, seq) .. id
end

-- raise the signal list `key` (length `len` as checked before the first write, nil when the
-- call did not check it). Unchecked, it is read here, after the call's writes, with pcall: a
-- list of another type then loses this one signal (the workers' and the scheduler's polls
-- still find the work; `fairque doctor` names the key) instead of failing, as "changed
-- nothing", a call whose writes are done
local function fq_signal(key, len)
  if len == nil then
    len = FQ_PCALL('LLEN', key)
    if FQ_TYPE(len) == 'table' then return end
  end
  if len == 0 then FQ_CALL('RPUSH', key, '1') end
end

-- write back every cache: counters, gauges, tenant passes, vtime, seq. HINCRBY replies the new
-- value: a tenant's `pushed` equal to what this call added is its first push ever, which also
-- enters it in the tenants index (<prefix>tenants, scored by q.now), at no extra call per push.
-- The per-tenant keys (ts:<u>, tenant:<u>) are written with pcall: one damaged behind the
-- client's back loses that tenant's figures (`fairque doctor` reports and recomputes them)
-- rather than failing a call whose other writes are done
local function fq_close(q)
  -- pcall: a queue counter that is not a number (`HSET stats pushed lots`) loses this call's
  -- count rather than failing a call whose other writes are done (the doctor recounts the
  -- queue's counters from the tenants')
  for name, by in FQ_NEXT, q.counters do
    if by ~= 0 then FQ_PCALL('HINCRBY', q.stats, name, fq_int(by)) end
  end
  for u, names in FQ_NEXT, q.tenant_counters do
    local key = fq_tenant_stats_key(q, u)
    for name, by in FQ_NEXT, names do
      if by ~= 0 then
        local now_count = FQ_PCALL('HINCRBY', key, name, fq_int(by))
        if name == 'pushed' and now_count == by then
          FQ_CALL('ZADD', fq_tenants_key(q), 'NX', fq_int(q.now), u)
        end
      end
    end
  end
  for u, t in FQ_NEXT, q.tenant_cache or FQ_NO_TENANTS do
    if t.dirty and not t.broken then
      local key = t.key or fq_tenant_key(q, u)
      if t.act == nil then
        FQ_PCALL('HSET', key, 'pass', fq_int(t.pass))
      elseif t.restored then
        -- rebuilt from its active-set member (claim.lua): weight and tier as served
        FQ_PCALL('HSET', key, 'pass', fq_int(t.pass), 'act', fq_int(t.act),
          'stride', fq_int(t.stride), 'tier', fq_int(t.tier))
      elseif t.act == t.act_read then -- its activation number is stored already
        FQ_PCALL('HSET', key, 'pass', fq_int(t.pass))
      else
        FQ_PCALL('HSET', key, 'pass', fq_int(t.pass), 'act', fq_int(t.act))
      end
    end
  end
  if q.ready_delta ~= 0 then
    fq_meta(q)
    q.meta_dirty = true
  end
  if q.meta_dirty then
    FQ_CALL('HSET', q.meta, 'vtime', fq_int(q.vtime), 'seq', q.seq_s or fq_int(q.seq),
      'ready', fq_int(q.ready_base + q.ready_delta), 'act', fq_int(q.act))
  end
  if q.tier_vtimes_changed ~= nil then
    for tier, _ in FQ_NEXT, q.tier_vtimes_changed do
      FQ_CALL('HSET', q.meta, 'vtime:' .. tier, fq_int(q.tier_vtimes[tier]))
    end
  end
  -- the wake signal: a list holding at most one token, which idle workers BLPOP
  -- (its length read by fq_check_queue, before any write, unless the script checked nothing)
  if q.wake then fq_signal(fq_wake_key(q), q.wake_len) end
  -- the schedule signal (same shape): the queue's next due time moved earlier
  if q.resched then fq_signal(fq_sched_key(q), q.sched_len) end
end
