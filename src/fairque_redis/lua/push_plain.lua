#!lua
--[[ push_plain: the plain push accelerator (ADR 80; docs/performance.md, switch `plain_push`).

  The push of ONE message that needs none of push.lua's other paths: a new task id, ready now
  (delay <= 0), no dependencies, no unique key, on a queue without limits.

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  ARGV: push.lua's with N = 1 (the client sends the very arguments it would send to push)
  Returns: {1} (stored: push.lua's reply, writes and counts), or -1 (referred, see below)

  Anything else is not decided here: the script returns -1 before its first write (nothing
  written, only reads made), and the client sends the same arguments to push.lua, which gives
  the answer, the error or the writes. So it refers: another message count, a unique key, a
  dependency, a delay, a priority or delay push.lua would refuse, an invalid id or tenant, a
  body over the limit, a queue with limits (meta `lim`), an id with any record (a duplicate,
  an expired record, another tenant's task), and any key push.lua checks that is damaged
  (another type, or a meta counter that is not a number).

  What it saves (a tenant that has ready work, the common case): push.lua's context (fq_open's
  table), four of meta's nine fields, the stats hash's HLEN (its HINCRBY is the first write and
  its check), the batch loop and its tables, fq_close's loops, and meta fields rewritten with
  the value they hold: 12 commands instead of 13, and about 0.72x push.lua's instructions. A
  tenant without ready work is activated by push.lua's own helpers (fq_open's context made
  from what was read, fq_push_ready, fq_close). The wake signal is raised as fq_close raises
  it (fq_signal): a change of fq_close's wake must be made here too (the equivalence test,
  tests/integration/test_plain_push.py, fails until it is).
]]
--- @include "_include/pushing"

-- the message (ARGV[9..17]): id, tenant, priority, delay ms, meta, body, unique key, window, D
local id, u, ps, dmss, body = ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[14]
local p = FQ_PRIORITY_OF[ps]
local dms = FQ_TONUMBER(dmss)
if ARGV[8] ~= '1' or ARGV[15] ~= '' or ARGV[16] ~= '0' or ARGV[17] ~= '0' or ARGV[18] ~= nil
  or p == nil or dms == nil or dms > 0 or dms ~= FQ_FLOOR(dms)
  or #body > FQ_TONUMBER(ARGV[7]) or not fq_valid_id(id) or not fq_valid_id(u) then
  return -1
end

-- push.lua's checks before its first write, each a read whose error refers the push: the six
-- sorted sets and active:0 (fq_check_zsets), meta and its counters (fq_meta), the wake list,
-- the task hash, the tenant's queue and hash (fq_push_probe), the stats hash (below)
local meta, stats = KEYS[1], KEYS[2]
local k = {prefix = fq_prefix(meta)} -- the key builders' context (keys.lua)
local now = fq_now(ARGV[1])
if FQ_TYPE(FQ_PCALL('ZINTERCARD', 7, KEYS[3], KEYS[4], KEYS[5], KEYS[6], fq_tenants_key(k),
  fq_parked_key(k), fq_active_key(k, '0'), 'LIMIT', 1)) == 'table' then return -1 end
local m = FQ_PCALL('HMGET', meta, 'vtime', 'seq', 'ready', 'act', 'lim')
if m['err'] ~= nil or m[5] == '1' then return -1 end
local vtime, seq, ready, act = FQ_TONUMBER(m[1] or '0'), FQ_TONUMBER(m[2] or '0'),
  FQ_TONUMBER(m[3] or '0'), FQ_TONUMBER(m[4] or '0')
if vtime == nil or seq == nil or ready == nil or act == nil then return -1 end
local wake_key = fq_wake_key(k)
local wake_len = FQ_PCALL('LLEN', wake_key)
if FQ_TYPE(wake_len) == 'table' then return -1 end
local key = fq_task_key(k, id)
local v = FQ_PCALL('HMGET', key, 'st', 'exp', 'u')
if v['err'] ~= nil or v[1] ~= false or v[2] ~= false or v[3] ~= false then return -1 end
local critical = p == FQ_CRITICAL_PRIORITY
local queue = critical and fq_critical_key(k, u) or fq_normal_key(k, u)
local size = FQ_PCALL(critical and 'LLEN' or 'ZCARD', queue)
if FQ_TYPE(size) == 'table' or FQ_TYPE(FQ_PCALL('HLEN', fq_tenant_key(k, u))) == 'table' then
  return -1
end
-- the queue's count of the push (fq_close's HINCRBY, pcall'd there): the first write, and the
-- check of the stats hash (push.lua's HLEN at open); a damaged hash or count refers the push
if FQ_TYPE(FQ_PCALL('HINCRBY', stats, 'pushed', 1)) == 'table' then return -1 end

if size == 0 then
  -- a tenant without ready work in this queue: push.lua's store and activation, its helpers
  -- on its context made from what was read here (fq_meta's fields; no limits)
  local q = fq_open(KEYS, ARGV, {later = true}, now)
  q.checks_due = nil
  q.vtime, q.seq, q.ready_base, q.act, q.lim_on = vtime, seq, ready, act, false
  q.wake_len = wake_len
  local pc = {checked = {}, had_ready = {}, now_s = fq_int(now), score_p = false,
    score_s = false}
  fq_push_ready(q, pc, key, id, u, p, ps, dmss, ARGV[13], body)
  fq_close(q)
else
  -- fq_push_ready and fq_close for a tenant that has ready work (so, without limits, active):
  -- the record, the tenant's queue, the counts, meta, the wake signal
  local seq_s = fq_int(seq + 1)
  local now_s = fq_int(now)
  FQ_CALL('HSET', key, 'u', u, 'p', ps, 'b', body, 'm', ARGV[13], 'rc', '0',
    'seq', seq_s, 'st', 'queued', 'rd', now_s, 'due', now_s, 'dms', dmss, 'rec', '0')
  if critical then
    FQ_CALL('RPUSH', queue, id)
  else
    FQ_CALL('ZADD', queue, fq_int(fq_score(p, now, FQ_TONUMBER(ARGV[3]))),
      FQ_SEQ_PADS[#seq_s] .. seq_s .. id)
  end
  if FQ_PCALL('HINCRBY', fq_tenant_stats_key(k, u), 'pushed', 1) == 1 then
    FQ_CALL('ZADD', fq_tenants_key(k), 'NX', now_s, u)
  end
  -- meta's four numbers as fq_close writes them, a field left out when it holds that text
  local vtime_s, ready_s, act_s = fq_int(vtime), fq_int(ready + 1), fq_int(act)
  if m[1] == vtime_s and m[4] == act_s then
    FQ_CALL('HSET', meta, 'seq', seq_s, 'ready', ready_s)
  else
    FQ_CALL('HSET', meta, 'vtime', vtime_s, 'seq', seq_s, 'ready', ready_s, 'act', act_s)
  end
  fq_signal(wake_key, wake_len)
end
return {1}
