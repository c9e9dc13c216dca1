#!lua flags=no-writes
--[[ task_list: a page of the tasks that ended, newest first (list_tasks; ADR 70, the indexes
  of _include/record.lua; fairque_core/memory/browse.py is the model).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) ix:<state>, ix:<state>:<tenant>, task:<id> of the entries read
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] states, comma-separated (finished, failed, canceled)  ARGV[9] tenant ('' = all)
  ARGV[10] limit  ARGV[11] cursor end ms ('' = from the newest)  ARGV[12] cursor task id
  Returns: {more (0|1), cursor end ms, cursor id, then per task: id, state, tenant, end ms,
           priority, retry count, meta, failure type, reason}. Entries are read in order of
           (end ms, id), descending, from every index at once; one whose record is gone,
           expired or in another state is skipped. At most FQ_LIST_SCAN entries are read:
           past that the page stops short, `more` set, its cursor at the last entry read.
]]
--- @include "_include/record"

local FQ_LIST_SCAN = 2000

local q = fq_open(KEYS, ARGV, {read = true}) -- writes nothing: no type check
local tenant = ARGV[9] ~= '' and ARGV[9] or nil
local limit = FQ_TONUMBER(ARGV[10])
local chunk = limit + 1

-- up to `n` entries of `key` after (cs, cid) in (score, member) descending order, as
-- {{score, id}, ...}: from the cursor's own rank when it is still there, else by score (the
-- cursor's ties first, those with a lower id)
local function fetch(key, cs, cid, n)
  local got
  local out = {}
  if cs == nil then
    got = FQ_CALL('ZRANGE', key, '+inf', '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, n, 'WITHSCORES')
  else
    local sc = FQ_CALL('ZSCORE', key, cid)
    if sc and FQ_TONUMBER(sc) == cs then
      local rank = FQ_CALL('ZREVRANK', key, cid)
      got = FQ_CALL('ZRANGE', key, rank + 1, rank + n, 'REV', 'WITHSCORES')
    else
      for _, m in ipairs(FQ_CALL('ZRANGE', key, fq_int(cs), fq_int(cs), 'BYSCORE', 'REV')) do
        if m < cid and #out < n then out[#out + 1] = {cs, m} end
      end
      got = FQ_CALL('ZRANGE', key, '(' .. fq_int(cs), '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
        n - #out, 'WITHSCORES')
    end
  end
  for i = 1, #got, 2 do out[#out + 1] = {FQ_TONUMBER(got[i + 1]), got[i]} end
  return out
end

local cs = ARGV[11] ~= '' and FQ_TONUMBER(ARGV[11]) or nil
local cid = ARGV[12]
local heads = {}
for state in string.gmatch(ARGV[8], '[^,]+') do
  local key = fq_ix_key(q, state, tenant)
  local buf = fetch(key, cs, cid, chunk)
  heads[#heads + 1] = {state = state, key = key, buf = buf, at = 1, full = #buf == chunk}
end

local items = {0, '', ''} -- more, cursor: set on return
local found, read = 0, 0
local last_s, last_id = nil, nil
while true do
  -- the newest head of the indexes (refilled when a full chunk is used up)
  local best = nil
  for _, h in ipairs(heads) do
    if h.at > #h.buf and h.full then
      local tail = h.buf[#h.buf]
      h.buf = fetch(h.key, tail[1], tail[2], chunk)
      h.at, h.full = 1, #h.buf == chunk
    end
    local e = h.buf[h.at]
    if e ~= nil then
      local b = best and best.buf[best.at]
      if b == nil or e[1] > b[1] or (e[1] == b[1] and e[2] > b[2]) then best = h end
    end
  end
  if best == nil then return items end
  if found == limit or read == FQ_LIST_SCAN then
    items[1], items[2], items[3] = 1, fq_int(last_s), last_id
    return items
  end
  local e = best.buf[best.at]
  best.at = best.at + 1
  read = read + 1
  last_s, last_id = e[1], e[2]
  -- (pcall: a record damaged into another type reads as gone)
  local v = FQ_PCALL('HMGET', fq_task_key(q, e[2]), 'st', 'u', 'exp', 'p', 'rc', 'm', 'km',
    'ft', 'rs')
  if v['err'] == nil and v[1] == best.state and v[2] and not fq_expired(v[3], q.now)
      and (tenant == nil or v[2] == tenant) then
    found = found + 1
    local meta = v[6]
    if meta == false or meta == '' then meta = v[7] or '' end
    local n = #items
    items[n + 1], items[n + 2], items[n + 3], items[n + 4] = e[2], v[1], v[2], fq_int(e[1])
    items[n + 5], items[n + 6], items[n + 7] = v[4] or '3', v[5] or '0', meta
    items[n + 8], items[n + 9] = v[8] or '', v[9] or ''
  end
end
