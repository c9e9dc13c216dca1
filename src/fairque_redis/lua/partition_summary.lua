#!lua flags=no-writes
--[[ partition_summary: one partition's load for the partitioned backend's picker (ADR 34).

  KEYS[1] meta  KEYS[2] tiers  KEYS[3] delayed  KEYS[4] parked  KEYS[5] intake
  ARGV[1] now in ms ('' = server TIME)  ARGV[2] the active sets' stem (+ tier)
  ARGV[3] the tenant records' stem (+ tenant)  ARGV[4] sample size (SUMMARY_SAMPLE)
  An active-set member is <activation number>|<tenant> (_include/tenant.lua; a bare tenant id
  in old data); a tenant without a stride has weight 1 (stride STRIDE_SCALE).
  Returns: {now, ready, paused 0/1, delayed head ms or -1, parked head ms or -1, #tiers,
           then per tier: tier, active count, sampled count, the sampled tenants' strides,
           then the entries waiting in the intake (ADR 47: a claim here ingests them)}
           (fairque_redis.partitioned.picker.parse_summary)
]]
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local sample = tonumber(ARGV[4])
local meta = redis.call('HMGET', KEYS[1], 'ready', 'pau')
local function head(key)
  local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if h[2] == nil then return -1 end
  return tonumber(h[2])
end
local out = {now, tonumber(meta[1] or '0'), meta[2] == '1' and 1 or 0,
  head(KEYS[3]), head(KEYS[4])}
local tiers = redis.call('ZRANGE', KEYS[2], 0, -1)
table.insert(out, #tiers)
for _, tier in ipairs(tiers) do
  local key = ARGV[2] .. tier
  local n = redis.call('ZCARD', key)
  local members
  if n <= sample then members = redis.call('ZRANGE', key, 0, -1)
  else members = redis.call('ZRANDMEMBER', key, sample) end
  table.insert(out, tonumber(tier))
  table.insert(out, n)
  table.insert(out, #members)
  for _, m in ipairs(members) do
    local bar = string.find(m, '|', 1, true)
    local u = m
    if bar ~= nil then u = string.sub(m, bar + 1) end
    table.insert(out, tonumber(redis.call('HGET', ARGV[3] .. u, 'stride') or '0'))
  end
end
local waiting = redis.pcall('LLEN', KEYS[5])
table.insert(out, type(waiting) == 'number' and waiting or 0)
return out
