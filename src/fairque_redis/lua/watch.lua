#!lua flags=allow-oom
--[[ watch: arm the end notification of a task a result waiter is about to block on (wait_done).

  KEYS[1] meta  KEYS[2] stats  KEYS[3] tiers  KEYS[4] delayed  KEYS[5] leases  KEYS[6] dlq
  (derived) task:<id>
  ARGV[1..7] common header (see _include/core.lua)
  ARGV[8] task id
  The ending scripts leave the token in done:<id> (fq_ended) only for a task whose record has
  `wt` = 1: a task nobody waits for ends without the three writes of the token. This script sets
  `wt` on a live task that has not ended, in one step with reading its state, so an end that
  comes after it leaves the token (the waiter's BLMOVE wakes), and an end that came before it
  is reported here (the waiter does not block).
  Returns: 1 ended (finished, failed or canceled), 0 armed (alive), -1 unknown or expired
]]
--- @include "_include/task"

-- writes only the task hash (with pcall): no queue-wide key needs checking
local q = fq_open(KEYS, ARGV, {read = true})
local id = ARGV[8]
local r = fq_rec(q, id)
if r == nil then return -1 end
if r.state == 'finished' or r.state == 'failed' or r.state == 'canceled' then return 1 end
if not r.waited then FQ_PCALL('HSET', fq_task_key(q, id), 'wt', '1') end
return 0
