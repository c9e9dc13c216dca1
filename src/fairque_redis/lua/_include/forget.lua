--[[ forget: a finished record nobody needs is deleted instead of kept (ADR 78).

  A finish item whose `has` field is '2' (no result) or '3' (a result) asks for the record not
  to be kept (the task's keep_result is False). fq_forget_flag reads that flag; the finish
  then deletes task:<id> (fq_forget_record) when nothing needs it: no dependents (its
  children:<id> list), no XCom values, no result waiter armed before the finish (`wt`), no
  unique key held for a window. Every other per-task key of a task that finishes so is absent
  already: waits:<id> is emptied before a task leaves `deferred`, done:<id> is written only
  for an armed waiter, xcom:<tenant>:<id> only with XCom values. A deleted record reads as
  unknown (get: nil), and a repeat of its finish is a lost lease.
]]
--- @include "task"

-- `has` as the finish reads it ('0' | '1'), and whether the item asks not to keep the record
local function fq_forget_flag(has)
  if has == '2' then return '0', true end
  if has == '3' then return '1', true end
  return has, false
end

-- the finish of task record `key` that needs no record (the caller has judged it): deleted
local function fq_forget_record(key)
  FQ_CALL('DEL', key)
end
