#!lua flags=allow-oom
--[[ schedule_mark: record a schedule's last fired tick, fenced by the scheduler lock.

  KEYS[1] lock  KEYS[2] schedules  KEYS[3] fired
  ARGV[1] token  ARGV[2] schedule name  ARGV[3] tick (epoch ms)
  Returns: 1 when recorded (or a later tick already was), 0 when the token does not hold the
           lock or the schedule is gone
]]

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then return 0 end
local tick = tonumber(ARGV[3])
local last = tonumber(redis.call('HGET', KEYS[3], ARGV[2]))
if last == nil or last < tick then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
end
return 1
