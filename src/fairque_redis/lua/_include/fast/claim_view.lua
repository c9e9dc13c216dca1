--[[ claim_view, fast: the claim's view of the head of the active set it serves (ADR 43), the
  accelerator `claim_view` (fairque_core.settings.accel; docs/performance.md). The reference,
  ../claim_view.lua, reads the set's head at every pick; this one must pick the same (the
  contract suite and the differential test run with it on and off). claim.lua includes one or
  the other (the script loader picks). It also holds the serves that need no pick once the
  view holds the whole active set (fq_reserve_more, ADR 52). Nothing here reads or writes a
  tenant's queues (claim.lua and its reservations do, ADR 52).
]]
--- @include "tenant"
-- the smallest claim that reads its active set through a view (below: one read per pick):
-- a view's set-up costs more than the reads it saves a claim of a few tasks (callgrind,
-- bench/bench_claim_finish_ir.py)
local FQ_AV_MIN_COUNT = 8

--[[ The claim's view of the head of the active set it serves (q.av). Serving a tenant gives
  it a new pass, and the next pick reads the set's head again: two commands per claimed task.
  Instead the first pick of a claim of FQ_AV_MIN_COUNT tasks or more reads the `want` lowest
  members at once (one ZRANGE, `want` = the tasks still to claim + 1), and the claim picks and
  rescores them in Lua; the new passes go back in one ZADD (fq_av_drop) before the set is read
  again and at the end of the claim. The result is the same as reading the head at every
  pick:
  - the view is two sequences: the members read and not rescored yet, in the order read (A,
    the reply itself and a cursor), and the members rescored in this view, kept sorted (B).
    The lowest member is the lower of their heads, in the sorted set's order (score, then the
    member's bytes: fq_member_below).
  - every member the view did not read sorts after the last one it read (the bound), and
    while the view is held nothing changes the set but the view's own moves and removals: any
    other write to it drops the view first (a tenant placed or deactivated that the view does
    not hold at a head, a repair, a member migrated; see fq_place, fq_deactivate,
    fq_migrate_member, fq_check_member). A's head is never above the bound; B's head may be,
    once A is used up: then the view is written back and read again. A set smaller than
    `want` is read whole (no bound).
  - a rescored pass is kept as fq_place writes it (fq_int), so the view orders what the set
    will hold; a member's pass and activation number are parsed only when compared.
  Reading a window also learns, for its tenants not seen yet in this call, whether any of
  them has critical work: one EXISTS of their critical lists; 0 marks them empty (q.crit) and
  fq_serve does not pop their lists. Within a claim nothing adds to a critical list after the
  due moves and unparks at its start, so the answer holds for the whole call.
]]

-- the activation number of a member as fq_active_member writes it (16 digits, `|`, the
-- tenant id); false for any other member (a bare id, a damaged one)
local function fq_member_act(member)
  local digits = string.match(member, '^(%d+)|')
  if digits ~= nil and #digits == FQ_SEQ_WIDTH then return FQ_TONUMBER(digits) end
  return false
end

-- member a below member b in a sorted set at one score (the bytes' order): by activation
-- number when both have one (fq_member_act: zero-padded to one width, so the numbers' order
-- is the bytes' order) and they differ, else byte by byte
local function fq_member_below(a, act_a, b, act_b)
  local from = 1
  if act_a and act_b then
    if act_a ~= act_b then return act_a < act_b end
    from = FQ_SEQ_WIDTH + 2
  end
  for k = from, math.min(#a, #b) do
    local x, y = string.byte(a, k), string.byte(b, k)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- A's k-th member: its pass and activation number, parsed on first use
local function fq_av_ascore(av, k)
  local asc = av.asc
  if asc == nil then
    asc = {}
    av.asc = asc
  end
  local s = asc[k]
  if s == nil then
    s = FQ_TONUMBER(av.got[2 * k])
    asc[k] = s
  end
  return s
end

local function fq_av_aact(av, k)
  local aact = av.aact
  if aact == nil then
    aact = {}
    av.aact = aact
  end
  local a = aact[k]
  if a == nil then
    a = fq_member_act(av.got[2 * k - 1])
    aact[k] = a
  end
  return a
end

-- B is one array, four slots a member from b[4j - 3] on: member, tenant, activation number
-- (false: not one fq_member_act reads), pass; its members are j = bh..bt

-- A's k-th member below B's j-th
local function fq_av_a_below_b(av, k, j)
  local b = av.b
  local sa, sb = fq_av_ascore(av, k), b[4 * j]
  if sa ~= sb then return sa < sb end
  return fq_member_below(av.got[2 * k - 1], fq_av_aact(av, k), b[4 * j - 3], b[4 * j - 1])
end

-- B's j-th member out (the members below it move up one place)
local function fq_av_bremove(av, j)
  local b, h = av.b, av.bh
  for k = 4 * j, 4 * h + 1, -1 do b[k] = b[k - 4] end
  b[4 * h - 3], b[4 * h - 2], b[4 * h - 1], b[4 * h] = nil, nil, nil, nil
  av.bh = h + 1
end

-- write the passes rescored in the view back (one ZADD) and let the view go
local function fq_av_drop(q)
  local av = q.av
  if av == nil then return end
  q.av = nil
  local b, args, n = av.b, {}, 0
  for j = av.bh, av.bt do
    args[n + 1], args[n + 2] = fq_int(b[4 * j]), b[4 * j - 3]
    n = n + 2
  end
  for s = 1, n, FQ_ZADD_CHUNK do
    FQ_CALL('ZADD', av.key, unpack(args, s, math.min(s + FQ_ZADD_CHUNK - 1, n)))
  end
end

-- tenant u's member (t.member: fq_check_member keeps the member it checked, for t.act) out
-- of the view: the member and its activation number (false: not one fq_member_act reads)
-- when it was A's head or in B; nil when the view does not hold it there
local function fq_av_take(av, t)
  local member = t.member
  if member == nil or t.member_of ~= t.act then return nil end
  local c = av.c
  if c <= av.n and av.got[2 * c - 1] == member then
    av.c = c + 1
    -- the number fq_check_member read from it, when written as fq_active_member writes it
    local _, stop = FQ_FIND(member, '^%d+|')
    return member, stop == FQ_SEQ_WIDTH + 1 and t.act
  end
  local b = av.b
  for j = av.bh, av.bt do
    if b[4 * j - 3] == member then
      local act = b[4 * j - 1]
      fq_av_bremove(av, j)
      return member, act
    end
  end
  return nil
end

-- fq_place's hook: true when u's member is held by the view (A's head or in B), rescored in
-- B; false when the caller writes it, the view dropped first when it is of the same set
-- member (of tenant u, activation number act or false) into B at its place for `pass`
local function fq_av_insert(av, member, u, act, pass)
  -- last in B, then down past the members above it (usually none: the highest pass)
  local b, bh, j = av.b, av.bh, av.bt + 1
  av.bt = j
  while j > bh do
    local o = 4 * j - 4 -- the member above: b[o - 3] .. b[o]
    local above = b[o]
    if pass > above then break end
    if pass == above then
      local other = b[o - 1]
      if act and other and act ~= other then -- fq_member_below's first case, inline
        if act > other then break end
      elseif not fq_member_below(member, act, b[o - 3], other) then
        break
      end
    end
    b[o + 1], b[o + 2], b[o + 3], b[o + 4] = b[o - 3], b[o - 2], b[o - 1], above
    j = j - 1
  end
  local o = 4 * j
  b[o - 3], b[o - 2], b[o - 1], b[o] = member, u, act, pass
end

local function fq_av_place(q, u, t, key)
  local av = q.av
  if av.key ~= key then return false end
  local member, act = fq_av_take(av, t)
  if member == nil then
    fq_av_drop(q)
    return false
  end
  -- the pass as fq_place writes it (fq_int: an integer; a pass that is not one is rare)
  local pass = t.pass
  if pass % 1 ~= 0 then pass = FQ_TONUMBER(fq_int(pass)) end
  fq_av_insert(av, member, u, act, pass)
  return true
end

-- fq_deactivate's hook (before its ZREM of u's member): the member leaves the view, its new
-- pass unwritten. A member the view holds elsewhere (never in a claim), or one that ZREM of
-- the member fq_active_member writes would not remove (a damaged one), drops the view
local function fq_av_forget(q, u, t, key)
  local av = q.av
  if av.key ~= key then return end
  local member, act = fq_av_take(av, t)
  if member == nil or not act then fq_av_drop(q) end
end

-- read the `want` lowest members of active set `key` into a new view
local function fq_av_open(q, key, want)
  local got = FQ_CALL('ZRANGE', key, 0, want - 1, 'WITHSCORES')
  local n = #got / 2
  local aten = {}
  -- the critical lists of the window's tenants not seen yet in this call (see above):
  -- q.crit[u] is 0 while asked about, then true when found empty, false when not
  local crit = q.crit
  if crit == nil then
    crit = {}
    q.crit = crit
  end
  local keys = {}
  for k = 1, n do
    local member = got[2 * k - 1]
    local u = member -- fq_member_tenant, inline
    if string.byte(member, FQ_SEQ_WIDTH + 1) == FQ_MEMBER_SEP_BYTE then
      u = FQ_SUB(member, FQ_SEQ_WIDTH + 2)
    end
    aten[k] = u
    if crit[u] == nil then
      crit[u] = 0
      keys[#keys + 1] = fq_critical_key(q, u)
    end
  end
  if #keys > 0 then
    local found = 0
    for s = 1, #keys, FQ_ZADD_CHUNK do
      found = found + FQ_CALL('EXISTS', unpack(keys, s, math.min(s + FQ_ZADD_CHUNK - 1,
        #keys)))
    end
    for k = 1, n do
      if crit[aten[k]] == 0 then crit[aten[k]] = found == 0 end
    end
  end
  local av = {
    key = key, got = got, n = n, c = 1, aten = aten, bounded = n == want, b = {}, bh = 1,
    bt = 0, place = fq_av_place, forget = fq_av_forget, drop = fq_av_drop,
  }
  if n > 0 then av.top = FQ_TONUMBER(got[2 * n]) end -- A's highest pass (fq_av_head)
  q.av = av
  return av
end

-- the lowest member of active set `key` by the view (opened or read again as needed):
-- member, score and tenant; false when the set is empty. A's members are all at or below
-- its last (A[n]), so a B head whose pass is above A[n]'s is above A's head too: the common
-- case (B holds the tenants just served, whose passes went up by a stride) needs neither
-- parsed
local function fq_av_head(q, key, want)
  -- a small claim reads one head per pick (see FQ_AV_MIN_COUNT): its first pick wants the
  -- claim's count + 1
  local off = q.av_off
  if off == nil then
    off = want <= FQ_AV_MIN_COUNT
    q.av_off = off
  end
  if off then
    local first = FQ_CALL('ZRANGE', key, 0, 0, 'WITHSCORES')
    if first[1] == nil then return false end
    return first[1], first[2], fq_member_tenant(first[1])
  end
  local av = q.av
  if av ~= nil and av.key ~= key then
    fq_av_drop(q)
    av = nil
  end
  for _ = 1, 2 do
    if av == nil then av = fq_av_open(q, key, want) end
    local c, n, bh = av.c, av.n, av.bh
    local b_pass = av.b[4 * bh] -- nil when B is empty
    if c <= n and (b_pass == nil or b_pass > av.top or fq_av_a_below_b(av, c, bh)) then
      return av.got[2 * c - 1], av.got[2 * c], av.aten[c]
    end
    if b_pass ~= nil then
      if not av.bounded or not fq_av_a_below_b(av, n, bh) then
        return av.b[4 * bh - 3], b_pass, av.b[4 * bh - 2]
      end
    elseif not av.bounded then
      return false
    end
    fq_av_drop(q) -- B's head is above the bound (or the window is used up): read again
    av = nil
  end
  return false -- never: a window read again has its lowest member at A's head
end

-- u was just served (fq_reserve) and its active set holds no other member: the next serves
-- are all u's while it has work, so up to `k` more are reserved at once, with the state the
-- serves one by one would leave (a pick would find u at the head each time: the view read
-- the set whole, no bound, its first sequence is used up and the rescored one holds u
-- alone). Only a scored set whose size is known and a critical list known empty qualify
-- (fq_reserve learnt both), and an integer pass and stride (the view's passes are integers,
-- fq_av_place)
local function fq_reserve_run(q, u, k)
  local av = q.av
  if av.b[4 * av.bh - 2] ~= u then return end
  local t = q.tenant_cache[u]
  local left = t.normal_left
  if not t.no_critical or left == nil or left == 0 or t.pass % 1 ~= 0
    or t.stride % 1 ~= 0 then
    return
  end
  if k > left then k = left end
  -- the k serves: each a reserved task of the scored set, one ready task fewer, the tier's
  -- virtual time at u's pass before the serve (the last one's stays), the pass a stride up
  local s = q.serve_n
  local serves = q.serves
  for j = s + 1, s + k do serves[j] = u end
  q.serve_n = s + k
  t.pend_n = (t.pend_n or 0) + k -- (its serve may have taken the last critical task)
  t.normal_left = left - k
  q.ready_delta = q.ready_delta - k
  local tier = fq_tier_key(q, t)
  fq_set_vtime(q, tier, t.pass + (k - 1) * t.stride)
  t.pass = t.pass + k * t.stride
  if left > k then
    av.b[4 * av.bh] = t.pass -- rescored in the view (fq_place), still alone in it
  else
    fq_deactivate(q, u) -- the last serve took its last task
  end
end

-- the view holds the whole active set (read whole, first sequence used up: every member is in
-- the sorted rescored sequence B, and each pick is B's head) and two or more tenants: up to
-- `k` serves are reserved in one loop, each of B's head, with the state the serves one by one
-- would leave (fq_reserve, fq_served and fq_av_place's steps for a tenant that keeps work:
-- the task reserved from its scored set, its pass a stride up and its member moved to its new
-- place in B, the tier's virtual time at the last serve's old pass). Only when every member
-- qualifies: a critical list known empty, a scored set of known size, an activation number
-- in its member, integer passes and strides; a tenant down to its last task stops the loop
-- (the general serve takes it and deactivates it)
local function fq_reserve_round(q, k)
  local av, cache = q.av, q.tenant_cache
  local b = av.b
  for j = av.bh, av.bt do
    local o = 4 * j
    local t = cache[b[o - 2]]
    if t == nil or not t.no_critical or t.normal_left == nil or not b[o - 1]
      or t.pass ~= b[o] or t.pass % 1 ~= 0 or t.stride % 1 ~= 0 then
      return
    end
  end
  local tier = fq_tier_key(q, cache[b[4 * av.bh - 2]]) -- the view's set: one tier
  local serves, s = q.serves, q.serve_n
  local served, lowest = 0, 0
  while served < k do
    local h = av.bh
    local o = 4 * h
    local u = b[o - 2]
    local t = cache[u]
    local left = t.normal_left
    if left <= 1 then break end
    local member, act, pass = b[o - 3], b[o - 1], b[o]
    b[o - 3], b[o - 2], b[o - 1], b[o] = nil, nil, nil, nil
    av.bh = h + 1
    t.normal_left = left - 1
    t.pend_n = (t.pend_n or 0) + 1
    s = s + 1
    serves[s] = u
    lowest = pass
    pass = pass + t.stride
    t.pass = pass
    t.dirty = true
    fq_av_insert(av, member, u, act, pass)
    served = served + 1
  end
  if served > 0 then
    q.serve_n = s
    q.ready_delta = q.ready_delta - served
    fq_set_vtime(q, tier, lowest)
  end
end

-- after a serve of u (fq_reserve) with `k` places left: the serves that need no pick
-- (fq_reserve_run, fq_reserve_round) when the view holds the whole active set
local function fq_reserve_more(q, u, k)
  local av = q.av
  if av == nil or av.bounded or av.c <= av.n or av.bt < av.bh then return end
  if av.bh == av.bt then
    fq_reserve_run(q, u, k)
  else
    fq_reserve_round(q, k)
  end
end
