--[[ events: the queue's event log (ADR 71), a capped stream `events` other processes read
  (queue.events(), `fairque events --follow`, the dashboard).

  Every script that makes a change worth telling appends its event here, in the same call as
  the change (so an event is never seen without its change, nor a change without its event):
  completed, failed, retried, dead_lettered, canceled (tasks); paused, resumed,
  limits_changed (the queue, a tier or a tenant). An entry's fields: t type, at time (ms; only
  with an injected clock: on server time the entry id's ms is the time), and as they apply
  id (task), u (tenant), n (task name), ft (failure type), err (the error or reason, cut to
  200 bytes), tier, lim (the limits record).
  No payloads, no results. The stream is capped with XADD's MAXLEN ~ <cap> (whole macro nodes
  trimmed, so it may hold a little more than the cap). The cap comes in the header's ARGV[2]
  after the strict-tiers flag (`0` + `10000`; nothing after the flag = events off, see
  _include/core.lua). The XADD is a pcall: an events key damaged into another type loses its
  events (`fairque doctor` reports the key) rather than failing a call whose writes are done.
]]
--- @include "core"


-- the events cap of this call (0 = events off), parsed once per call
local function fq_events_cap(q)
  local cap = q.ev_cap
  if cap == nil then
    cap = FQ_TONUMBER(FQ_SUB(q.argv[2], 2)) or 0
    q.ev_cap = cap
    q.ev_cap_s = fq_int(cap)
  end
  return cap
end

-- append one event of type `kind` with the field-value pairs that follow. On server time
-- the entry's id tells its time (its ms part is the server's clock, as q.now is); with an
-- injected clock (tests) `at` carries the call's time
local function fq_event(q, kind, ...)
  if (q.ev_cap or fq_events_cap(q)) <= 0 then return end
  if q.server_time then
    FQ_PCALL('XADD', fq_events_key(q), 'MAXLEN', '~', q.ev_cap_s, '*', 't', kind, ...)
  else
    FQ_PCALL('XADD', fq_events_key(q), 'MAXLEN', '~', q.ev_cap_s, '*', 't', kind,
      'at', fq_int(q.now), ...)
  end
end

-- the name a task was pushed with, from its record's `m` (the 7th value of that JSON array,
-- scripting/calls/records.py encode_meta); '' for none, or when `m` is unreadable
local function fq_event_name(m)
  if FQ_TYPE(m) ~= 'string' or m == '' or FQ_SUB(m, -5) == '},""]' then return '' end
  local ok, v = pcall(cjson.decode, m)
  if ok and FQ_TYPE(v) == 'table' and FQ_TYPE(v[7]) == 'string' then return v[7] end
  return ''
end

-- a task's event: task `id` of tenant u, its name read from its record's `m` (given as `m`
-- when the caller read it already; a finish empties it); `ft` the failure type and `text`
-- the error or reason, when given
local function fq_event_task(q, kind, id, u, ft, text, m)
  if (q.ev_cap or fq_events_cap(q)) <= 0 then return end
  local name = fq_event_name(m or FQ_PCALL('HGET', fq_task_key(q, id), 'm'))
  if text == nil then
    fq_event(q, kind, 'id', id, 'u', u, 'n', name)
  else
    fq_event(q, kind, 'id', id, 'u', u, 'n', name, 'ft', ft or '',
      'err', FQ_SUB(text, 1, 200))
  end
end
