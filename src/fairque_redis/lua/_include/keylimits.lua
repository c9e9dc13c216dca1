--[[ keylimits: limits by key (ADR 79), in one table of helpers (FQ_KEYLIM).

  Mirrors fairque_core/domain/key_limits.py and fairque_core/memory/key_limits.py step for
  step: keep them in step. Keys: hash `keylim` (limit key -> `max_running,rate,burst,g`, g 1
  for one scope across tenants), meta `klim` 1 while it holds a key (the claim looks at a
  task's key only then: q.klim), per key the hash `ks:<key>` with per scope (the tenant id,
  or '' for a global key) `r|<t>` leases counted, `t|<t>` GCRA tat (us), `h|<t>` no start
  before (ms), `p|<t>` tasks parked; per scope (`<key>|<t>`) the sorted set `kp:<scope>` of
  parked ids by push sequence (they go back in push order, wherever they were parked). A task's hash: `lc`
  the scope its lease is counted in (else '1' or absent, limits.lua), `kp` the scope it is
  parked in. A scope held by its rate waits in `parked` as `|k|<scope>`.
  limits.lua includes this file (its due step calls FQ_KEYLIM.settle); the helpers that count
  a start or put a task back (admit, settle, release, lease_ended) are in task.lua, after
  the GCRA and record helpers they use.
]]
--- @include "tenant"

local FQ_KEYLIM = {}

-- the limit key a record's meta `m` ends with (`["<key>"]]`, records.encode_meta), or nil
function FQ_KEYLIM.key_of(m)
  if FQ_TYPE(m) ~= 'string' or string.byte(m, -2) ~= 93 then return nil end -- not `]]`
  return string.match(m, '%["([^"]+)"%]%]$')
end

-- key `k`'s limits {mr, rate, burst, g}, or false: read once per call
function FQ_KEYLIM.lim(q, k)
  local cache = q.klims
  if cache == nil then
    cache = {}
    q.klims = cache
  end
  local lim = cache[k]
  if lim == nil then
    local s = FQ_CALL('HGET', fq_keylim_key(q), k)
    lim = false
    if s then
      local p = {}
      local n = 1
      for part in string.gmatch(s .. ',', '([^,]*),') do
        p[n] = part
        n = n + 1
      end
      lim = {mr = FQ_TONUMBER(p[1]), rate = FQ_TONUMBER(p[2]), burst = FQ_TONUMBER(p[3]),
        g = p[4] == '1'}
    end
    cache[k] = lim
  end
  return lim
end

-- a scope's key and tenant part ('' for a global key)
function FQ_KEYLIM.split(scope)
  local at = FQ_FIND(scope, '|', 1, true)
  return FQ_SUB(scope, 1, at - 1), FQ_SUB(scope, at + 1)
end

-- a parked task r leaves (canceled, purged)
function FQ_KEYLIM.forget(q, r)
  local k, t = FQ_KEYLIM.split(r.kp)
  FQ_CALL('ZREM', fq_keylim_key(q, 'kp', r.kp), r.id)
  FQ_CALL('HINCRBY', fq_keylim_key(q, 'ks', k), 'p|' .. t, -1)
  FQ_CALL('HDEL', r.key or fq_task_key(q, r.id), 'kp')
  r.kp = false
end
