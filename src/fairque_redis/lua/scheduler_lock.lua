#!lua flags=allow-oom
--[[ scheduler_lock: renew or release the scheduler lock, only for the token holding it
  (taking a free lock is a plain SET NX PX; see fairque_redis/backends/schedules.py).

  KEYS[1] lock
  ARGV[1] token  ARGV[2] 'renew' or 'release'  ARGV[3] lease in ms (renew)
  Returns: 1 when the token held the lock (renewed or released), else 0
]]

if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
end
return 1
