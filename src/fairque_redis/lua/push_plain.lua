#!lua
--[[ push_plain: the plain push accelerator (ADR 80; docs/performance.md, switch `plain_push`).

  The push of ONE message that needs none of push.lua's other paths: a new task id, ready now
  (delay <= 0), no dependencies, no unique key, on a queue without limits. Same KEYS and ARGV
  as push.lua with N = 1 (the client sends the very arguments it would send to push), and the
  same reply ({1}: stored) when it stores.

  Anything else is not decided here: the script returns -1 before its first write (nothing
  written, only reads made), and the client sends the same arguments to push.lua, which gives
  the answer, the error or the writes. So it refers: another message count, a unique key, a
  dependency, a delay, a priority or delay push.lua would refuse, an invalid id or tenant, a
  body over the limit, a queue with limits (meta `lim`), an id with any record (a duplicate,
  an expired record, another tenant's task), and a damaged task hash, tenant queue or tenant
  hash. The queue-wide checks are push.lua's own (fq_open with the same options, in the same
  order, before anything is read for the message): a damaged meta, stats, wake or sorted set
  fails this call exactly as it fails push.lua.

  What it saves is Lua, not commands (the same 13 for an active tenant): no loop, no per-call
  tables of a batch (at, state, seen, owners, out), no dependency or unique-key branches.
  Stored, it runs push.lua's own helpers: fq_push_probe, fq_push_ready, fq_close.
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

-- push.lua's open: the queue-wide checks, in its order, with its errors
local q = fq_open(KEYS, ARGV, {meta = true, sched = false})
if q.lim_on then return -1 end
local key = fq_task_key(q, id)
local v = FQ_PCALL('HMGET', key, 'st', 'exp', 'u')
if v['err'] ~= nil or v[1] ~= false or v[2] ~= false or v[3] ~= false then return -1 end
local pc = {checked = {}, had_ready = {}, now_s = fq_int(q.now), score_p = false,
  score_s = false}
if fq_push_probe(q, pc, u, p) ~= nil then return -1 end

fq_push_ready(q, pc, key, id, u, p, ps, dmss, ARGV[13], body)
q.counters.pushed = 1
fq_close(q)
return {1}
