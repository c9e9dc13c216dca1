--[[ keys: the one place the Lua scripts spell a key name (KeySpace in keys.py is the Python
  side; both must produce the same bytes).

  Every key of a queue is `<prefix><family>` or `<prefix><family>:<id>`, with the id (task,
  tenant or tier) always last. The prefix (`fq:{<queue>}:`, hash tag included) is derived from
  the anchor key KEYS[1] (`<prefix>meta`) by fq_prefix; the other anchors (stats, tiers,
  delayed, leases, dlq) come in as KEYS[2..6] and are never spelled here. Each builder is a
  plain concatenation (the active-set key kept per call): no redis.call.
]]

-- the globals the scripts call most, as locals (FQ_NEXT: a `for k, v in FQ_NEXT, t` loop
-- is `pairs` without its call): in the function library (ADR 41) a global
-- is a lookup in the library's environment and then, through its metatable, in the real
-- globals (and `redis.call` one more in `redis`), on every use; a local of the library's top
-- level is an upvalue of each function (ADR 44). Set by the library's first call
-- (Redis 7.0 runs a library's top level without these globals)
local FQ_CALL = redis.call
local FQ_PCALL = redis.pcall
local FQ_FORMAT = string.format
local FQ_TONUMBER = tonumber
local FQ_TYPE = type
local FQ_FIND = string.find
local FQ_SUB = string.sub
local FQ_FLOOR = math.floor
local FQ_NEXT = next

-- #'meta': the anchor key KEYS[1] is `<prefix>meta`

-- the key prefix shared by every key of the queue, from its anchor key (KeySpace.prefix)
local function fq_prefix(meta)
  return FQ_SUB(meta, 1, #meta - 4)
end

-- per task (KeySpace.task, .waits, .children)
local function fq_task_key(q, id)
  return q.prefix .. 'task:' .. id
end

local function fq_waits_key(q, id)
  return q.prefix .. 'waits:' .. id
end

local function fq_children_key(q, id)
  return q.prefix .. 'children:' .. id
end

-- per tenant (KeySpace.critical, .normal, .tenant, .tenant_stats)
local function fq_critical_key(q, u)
  return q.prefix .. 'c:' .. u
end

local function fq_normal_key(q, u)
  return q.prefix .. 'n:' .. u
end

local function fq_tenant_key(q, u)
  return q.prefix .. 'tenant:' .. u
end

local function fq_tenant_stats_key(q, u)
  return q.prefix .. 'ts:' .. u
end

-- per tier (KeySpace.active): `tier` is already a decimal string (fq_int, or a `tiers` member)
-- built once per call and tier (a claim reaches it at every serve)
local function fq_active_key(q, tier)
  local cache = q.active_keys
  if cache == nil then
    cache = {}
    q.active_keys = cache
  end
  local key = cache[tier]
  if key == nil then
    key = q.prefix .. 'active:' .. tier
    cache[tier] = key
  end
  return key
end

-- per task, results (KeySpace.done, .xcom): the end notification list of a task, and the
-- XCom values of a task of tenant u (the tenant's length first: ids may hold ':')
local function fq_done_key(q, id)
  return q.prefix .. 'done:' .. id
end

local function fq_xcom_key(q, u, id)
  return q.prefix .. 'xcom:' .. #u .. ':' .. u .. ':' .. id
end

-- the browse indexes (KeySpace.index; record.lua): of the tasks that ended in `state`, of
-- tenant u or (u nil) of the queue
local function fq_ix_key(q, state, u)
  if u == nil then return q.prefix .. 'ix:' .. state end
  return q.prefix .. 'ix:' .. state .. ':' .. u
end

-- per tenant and unique key (KeySpace.unique): who holds the key
local function fq_unique_key(q, u, key)
  return q.prefix .. 'uniq:' .. #u .. ':' .. u .. ':' .. key
end

-- tenants (and the queue, member `|queue`) held by a rate limit, scored by the time they may
-- start again (KeySpace.parked; flow control, limits.lua)
local function fq_parked_key(q)
  return q.prefix .. 'parked'
end

-- derived queue-wide keys (KeySpace.tenants, .wake, .sched)
local function fq_tenants_key(q)
  return q.prefix .. 'tenants'
end

local function fq_wake_key(q)
  return q.prefix .. 'wake'
end

local function fq_sched_key(q)
  return q.prefix .. 'sched'
end

-- the intake (ADR 47): producers' entries waiting to be ingested, and the entries an ingest
-- could not read at all (KeySpace.intake, .intake_bad)
local function fq_intake_key(q)
  return q.prefix .. 'intake'
end

local function fq_intake_bad_key(q)
  return q.prefix .. 'intake:bad'
end

-- the queue's event log (ADR 71): a capped stream, written by _include/events.lua
-- (KeySpace.events)
local function fq_events_key(q)
  return q.prefix .. 'events'
end

-- limits by key (ADR 79; KeySpace.keylim, .key_state, .key_parked): the hash of every key's
-- limits (`family` nil), a limit key's state hash (`ks`, `id` the key) or a scope's parked
-- set (`kp`, `id` the scope)
local function fq_keylim_key(q, family, id)
  if family == nil then return q.prefix .. 'keylim' end
  return q.prefix .. family .. ':' .. id
end
