--[[ forget: a finished record nobody needs is deleted instead of kept (ADR 78).

  A finish item whose `has` field is '2' (no result) or '3' (a result) asks for the record not
  to be kept (the task's keep_result is False). FQ_FORGET.flag reads that flag; the finish
  then deletes task:<id> (FQ_FORGET.record) when nothing needs it (FQ_FORGET.ok): no
  dependents (its children:<id> list), no XCom values, no result waiter armed before the
  finish (`wt`), no unique key held for a window. Such a task writes no story and enters no
  browse index (record.lua, ADR 70). Every other per-task key of a task that finishes so is absent
  already: waits:<id> is emptied before a task leaves `deferred`, done:<id> is written only
  for an armed waiter, xcom:<tenant>:<id> only with XCom values. A deleted record reads as
  unknown (get: nil), and a repeat of its finish is a lost lease.
]]
--- @include "task"

local FQ_FORGET = {}
-- `has` as the finish reads it ('0' | '1'), and whether the item asks not to keep the record
function FQ_FORGET.flag(has)
  if has == '2' then return '0', true end
  if has == '3' then return '1', true end
  return has, false
end

-- whether nothing needs the record of task r (read by the finish's general path) that
-- finishes with `nx` XCom values: no armed waiter, no unique key held for a window, no XCom
-- values, no dependents (`kin`: some task of the call has a children list)
function FQ_FORGET.ok(q, r, nx, kin)
  if nx > 0 or r.waited or r.unique_window > 0 then return false end
  return not kin or FQ_CALL('EXISTS', fq_children_key(q, r.id)) == 0
end

-- the finish of task record `key` that needs no record (the caller has judged it): deleted.
-- Its story (record.lua) is not written and it enters no browse index; the `completed` event
-- is told all the same (the events stream is the queue's, not the task's)
function FQ_FORGET.record(key)
  FQ_CALL('DEL', key)
end
