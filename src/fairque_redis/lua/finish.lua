#!lua flags=allow-oom
--[[ finish: mark leased tasks FINISHED with their results (finish and finish_batch).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id> waits:<id> children:<id> and the dependents' tenant keys
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] 1 = fail with FQ_E_LEASE_LOST on a lost lease (single finish: N must be 1, since an
          error reply does not undo the items before it), 0 = report it
  ARGV[9] number of items N, then per item: task id, token, has result (0|1), result, X, then
          X pairs of XCom key and encoded value
  A finished record drops its body and metadata (b and m become empty, in the same HSET as
  the state: no HDEL) and counts its result's size in the result_bytes counter. Its XCom values go to xcom:<tenant>:<id> in the same step (so a child
  never sees a finished parent without them), kept as long as the record; the task's end is
  notified (fq_ended: result waiters wake, its unique key is held for its window).
  Returns: array of N integers, 1 = finished, 0 = lease lost (item left unchanged). A finish
           repeated with the token that finished the task (a lost reply, sent again) is 1 and
           changes nothing: a finished task keeps its last lease token in `tok`.
  Errors: FQ_E_LEASE_LOST <id> (only when ARGV[8] is 1)
  The work is fq_finish (_include/finish.lua), shared with finish_claim.lua.
]]
--- @include "_include/finish"

local q = fq_open(KEYS, ARGV, {later = true}) -- checked by fq_finish, before its first write
local out, rest = fq_finish(q, ARGV, 9, ARGV[8] == '1') -- rest: the error when out is nil
if out == nil then return rest end
fq_close(q)
return out
