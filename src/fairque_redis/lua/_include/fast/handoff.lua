--[[ handoff (ADR 81, accelerator `wake_handoff`): a push that made work ready claims it for an
  idle worker that waits on a list of its own, and puts the claim's reply on that list, so the
  worker's BLPOP returns the task itself: one server call after the push, not a wake and a
  claim. Only the top level of push.lua and claim.lua includes this file.

  <prefix>waiters (hash): field = the waiting round's own list `<prefix>hand:<nonce>`, value =
  `deadline ms \n worker id \n lease ms \n count \n token 1 \n ... token count \n` (written by
  the worker's pipeline before its BLPOP; see fairque_redis/backends/wake_claim.py). A round
  is taken once: the push's HDEL, or the HDEL of the claim pipelined behind that BLPOP.
  The claim made for the worker is fq_claim itself on the push's open queue (the claim the
  worker would have sent after the wake, with its own lease parameters and tokens): the same
  selection, the same writes. The reply on the list is the claim's reply, each element
  `s<len>:<bytes>`, `i<integer>:` or `n:` (false).
]]
--- @include "claim"

-- the push (push.lua, before fq_close): when the call made work ready (q.wake) and a worker
-- waits, lease for it what its claim would have, and hand the reply over. A round past its
-- deadline (a worker gone between its registration and its pop) is dropped; a claim that
-- leased nothing (paused, limits) leaves the round and the wake signal as they were
local function fq_hand_give(q)
  local waiters = q.prefix .. 'waiters'
  local mine = q.prefix .. 'hand:'
  for _ = 1, 3 do
    local picked = FQ_PCALL('HRANDFIELD', waiters, 1, 'WITHVALUES')
    if FQ_TYPE(picked) ~= 'table' or picked['err'] ~= nil or picked[1] == nil then return end
    local own, entry = picked[1], picked[2]
    FQ_CALL('HDEL', waiters, own)
    local a, k = {}, 6
    for part in string.gmatch(entry, '([^\n]*)\n') do
      k = k + 1
      a[k] = part
    end
    -- a[7] deadline, a[8] worker id, a[9] lease ms, a[10] count, then the tokens: fq_claim's
    -- arguments from 8 on once a[11] says "no groups" (the tokens moved one place up)
    local count = FQ_TONUMBER(a[10])
    if FQ_SUB(own, 1, #mine) == mine and count ~= nil and k == 10 + count
      and (FQ_TONUMBER(a[7]) or 0) >= q.now then
      for t = k, 11, -1 do a[t + 1] = a[t] end
      a[11] = '0'
      local raised = q.wake
      q.wake = nil -- the push's token is the one this worker would have taken
      local out = fq_claim(q, a, 8)
      if out[2] == 0 then
        FQ_CALL('HSET', waiters, own, entry)
        q.wake = raised or q.wake
        return
      end
      local parts = {}
      for j = 1, #out do
        local v = out[j]
        if FQ_TYPE(v) == 'number' then
          parts[j] = 'i' .. fq_int(v) .. ':'
        elseif v == false or v == nil then
          parts[j] = 'n:'
        else
          parts[j] = 's' .. #v .. ':' .. v
        end
      end
      FQ_CALL('RPUSH', own, table.concat(parts))
      FQ_CALL('PEXPIRE', own, a[9])
      return
    end
  end
end

-- the claim pipelined behind a waiting round's BLPOP (claim.lua, KEYS[7] waiters, KEYS[8] the
-- round's own list): the round ends here. Still registered: nil (claim as usual). Taken by a
-- push: {0, -1, the handed reply or false when the BLPOP popped it already}
local function fq_hand_take(keys)
  if FQ_PCALL('HDEL', keys[7], keys[8]) ~= 0 then return nil end
  local blob = FQ_PCALL('LPOP', keys[8])
  if FQ_TYPE(blob) ~= 'string' then blob = false end
  return {0, -1, blob}
end
