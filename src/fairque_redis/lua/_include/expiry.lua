--[[ expiry: a task not started by its expires_at is never run (ADR 77).

  The message's meta (field m, the JSON the client wrote: records.encode_meta) starts with
  the expiry, a number of epoch ms, when the task has one: `[<ms>,"<content type>",...`; every other meta
  starts with the content type, a string: `["`. A claim that finds a task at or past its
  expiry, popped from its tenant's queue (claim.lua's lease) or due from `delayed`
  (fq_move_due), moves it to the DLQ as `stale` instead: counted `dead` and `stale`, its
  dependents canceled as those of any dead parent (FQ_DEPS.to_dlq). No handler runs, no lease, no
  token and no `claimed` count is spent on it; the claim's tenant pass is given back when the
  claim ends (fq_claim, FairState.refund).
]]
--- @include "deps"

-- a claim pops at most its count plus this many tasks (STALE_CLAIM_LIMIT in
-- fairque_core/domain/models.py; a test keeps the two equal): a backlog of stale tasks is
-- cleared by successive claims, none of which runs long
local FQ_STALE_CLAIM_LIMIT = 256

-- the expiry (epoch ms) meta `m` carries, or nil (none, or a meta that is not a string)
local function fq_expiry_of(m)
  if FQ_TYPE(m) ~= 'string' or string.byte(m, 2) == 34 then return nil end -- '"': none
  -- the expiry, then the content type (a string): a damaged record whose content type reads
  -- as a number is not one (it is poisoned when claimed, as before)
  return FQ_TONUMBER(string.match(m, '^%[(%d+),"'))
end

-- task `id` with meta `m` is at or past its expiry at q.now: it goes to the DLQ as `stale`
-- (true). False when it has none, is not yet expired, or has no readable record
local function fq_stale(q, id, m)
  local xp = fq_expiry_of(m)
  if xp == nil or q.now < xp then return false end
  local r = fq_rec(q, id)
  if r == nil then return false end
  FQ_DEPS.to_dlq(q, r, 'stale', 'not started by its expiry at ' .. fq_int(xp) .. ' ms')
  fq_bump(q, r.tenant, 'stale', 1)
  return true
end
