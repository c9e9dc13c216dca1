--[[ pushing: push.lua's constants and per-message helpers.

  In the function library (ADR 41) an include's definitions are made once, at FUNCTION LOAD,
  while a script body's own locals, tables and closures are made again on every call: what the
  push body needs besides its per-call state lives here (ADR 44).
]]
--- @include "deps"

-- the longest task or tenant id (the id grammar of fairque_core validation)
local FQ_MAX_ID_LEN = 128
local FQ_ID_PATTERN = '^[%w_%.:@/%+=#%-]+$'
-- ARGV values per message before its D parent ids: id, user, priority, delay, meta, body,
-- unique key, unique window, D
local FQ_MESSAGE_FIELDS = 9
-- the priorities as the client spells them (fq_int): read without tonumber, which costs more
-- than the lookup; anything else takes the checked path in push.lua. Likewise a delay, window
-- or dependency count of '0' (the common case) is read without tonumber
-- the zeros that pad a formatted push sequence of 1-16 digits to FQ_SEQ_WIDTH (fq_member)
local FQ_SEQ_PADS = {'000000000000000', '00000000000000', '0000000000000', '000000000000', '00000000000', '0000000000', '000000000', '00000000', '0000000', '000000', '00000', '0000', '000', '00', '0', ''}
local FQ_PRIORITY_OF = {['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6}
local function fq_valid_id(s)
  local len = #s
  return len >= 1 and len <= FQ_MAX_ID_LEN and FQ_FIND(s, FQ_ID_PATTERN) ~= nil
end

-- a key this call will write holds another type (damaged behind the client's back): refuse
-- the whole call, typed, before the first write. `probe` is a cheap read of that type; its
-- reply is returned
local function fq_probe(key, probe, want)
  local reply = FQ_PCALL(probe, key)
  if FQ_TYPE(reply) == 'table' then fq_check_type(key, want) end
  return reply
end

-- the task holding unique key `ukey` now, or nil (free, window over, or holder gone)
local function fq_unique_holder(q, ukey, now)
  local hold = FQ_CALL('GET', ukey)
  if not hold then return nil end
  local holder, until_ms = string.match(hold, '^(.*)|(%d+)$')
  if holder == nil then
    if fq_rec(q, hold) == nil then return nil end
    return hold
  end
  if FQ_TONUMBER(until_ms) > now then return holder end
  return nil
end
