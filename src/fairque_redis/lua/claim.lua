#!lua flags=allow-oom
--[[ claim: lease up to `count` ready tasks, fairly (InMemoryBackend.claim).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> c:<tenant> n:<tenant> active:<tier> tenant:<t> ts:<t> intake
  intake:bad (first, up to 256 entries of the intake are ingested: _include/intake.lua)
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] worker id  ARGV[9] lease ms  ARGV[10] count  ARGV[11] 1 = groups follow, 0 = all
  then (groups) A, A assigned tenant ids, S, S steal tenant ids
  then `count` lease tokens (the i-th claimed task gets the i-th token)
  Raises the wake signal when it claimed or ingested and ready tasks remain, or entries remain
  in the intake.
  Returns: {now_ms, n, then per claimed task: id, tenant, priority, retry count, meta, body,
           recoveries, then the tenants and task keys it repaired}
  A tenant whose structures were damaged behind the client's back (a queue deleted or of
  another type, its hash gone or of another type, a stale active-set member) is repaired or
  deactivated and skipped, a task key of another type is dropped, each counted as `repaired`
  (stats) and named after the claimed tasks: one damaged tenant never stops the others.
  The work is fq_claim (_include/claim.lua), shared with finish_claim.lua. A claim on an
  idle queue (no active tenant, an empty intake, nothing delayed or parked that is due:
  fq_claim_idle) returns {now_ms, 0} before the queue is opened and checked (ADR 59).
]]
--- @include "_include/claim"

local now = fq_now(ARGV[1])
if fq_claim_idle(KEYS, now) then return {now, 0} end
local q = fq_open(KEYS, ARGV, {meta = true}, now) -- reads meta anyway (q.paused): its type check
local out = fq_claim(q, ARGV, 8)
fq_close(q)
return out
