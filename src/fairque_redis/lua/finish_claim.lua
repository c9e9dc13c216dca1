#!lua flags=allow-oom
--[[ finish_claim: finish a batch of leased tasks, then claim, in one call (ADR 40): the
  worker's acknowledgements and its next claim share one script call and one round trip.

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) those of finish.lua and claim.lua
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] number of finish items N, then per item as finish.lua's (task id, token, has result
          (0|1), result, X, then X pairs of XCom key and encoded value); a lost lease is
          reported, never an error (finish.lua's ARGV[8] = 0)
  then the claim's arguments as claim.lua's ARGV[8..]: worker id, lease ms, count, 1 = groups
          follow, 0 = all, (groups) A, A assigned tenant ids, S, S steal tenant ids, then
          `count` lease tokens
  In that order, on one open queue: the claim sees what the finish changed (a tenant's cap or
  the queue's max_running freed by a finished lease, dependents the finish made ready). The
  wake signal is raised as claim.lua raises it when the claim leased tasks; when it leased
  none, as finish.lua would have (work the finish made ready is left for other workers).
  Returns: {finish flags, claim reply}: finish flags as finish.lua's reply (N integers, 1 =
           finished, 0 = lease lost), claim reply exactly as claim.lua's
]]
--- @include "_include/finish"
--- @include "_include/claim"

local q = fq_open(KEYS, ARGV, {meta = true}) -- the claim reads meta anyway: its type check
local flags, at = fq_finish(q, ARGV, 8, false) -- at: where the claim's arguments start
-- the finish's wake (work it made ready, a cap it freed) counts only when the claim leases
-- nothing: a claim that leases raises it itself when ready work is left
local finish_wake = q.wake
q.wake = false
local out = fq_claim(q, ARGV, at)
if out[2] == 0 then q.wake = q.wake or finish_wake end
fq_close(q)
return {flags, out}
