-- sluice: one replica's claim of its portions of RLQS limits, atomically per bucket.
--
-- Each bucket is one hash, one field per replica, its value "portion expiry demand": the part
-- of the limit the replica holds in parts per million (integers: no float drift in the sum),
-- when the portion lapses (us), and the replica's demand in requests per second (%.17g, so the
-- double survives the trip). A portion is given only here, against the live portions of the
-- other replicas, so the live portions of a bucket never sum past 1000000.
--
-- KEYS: the bucket hashes (one slot on Redis Cluster).
-- ARGV[1]: the replica's name. ARGV[2]: one binary string of little-endian fields (struct):
--   now (i8, us; -1 for Redis's own clock, TIME), ttl (i8, us), then per key: wanted (i8, ppm,
--   0..=1000000), demand (d).
-- Reply: one binary string, per key: the portion (i8, ppm), the others' demand (d), the number of
--   other live replicas (i8).
local unpack_args, pack, format, match = struct.unpack, struct.pack, string.format, string.match
local min, max, ceil = math.min, math.max, math.ceil
local replica, packed = ARGV[1], ARGV[2]
local now, ttl, at = unpack_args('<i8i8', packed)
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local expiry = now + ttl
local reply = {}
for i, key in ipairs(KEYS) do
  local wanted, demand
  wanted, demand, at = unpack_args('<i8d', packed, at)
  local fields = redis.call('HGETALL', key)
  local claimed, others_demand, others, longest, dead = 0, 0, 0, expiry, {}
  for j = 1, #fields, 2 do
    local who = fields[j]
    if who ~= replica then
      local held, until_us, their_demand = match(fields[j + 1], '^(%d+) (%d+) (%S+)$')
      held, until_us = tonumber(held), tonumber(until_us)
      if held == nil or until_us == nil or until_us <= now then
        -- Lapsed (its replica stopped renewing), or not ours to read: it holds nothing.
        dead[#dead + 1] = who
      else
        claimed = claimed + held
        others_demand = others_demand + (tonumber(their_demand) or 0)
        others = others + 1
        longest = max(longest, until_us)
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
  local portion = max(0, min(wanted, 1000000 - claimed))
  redis.call('HSET', key, replica, format('%d %d %.17g', portion, expiry, demand))
  -- The hash outlives its longest-lived portion by nothing: once every replica stops, it is gone.
  redis.call('PEXPIRE', key, max(1, ceil((longest - now) / 1000)))
  reply[i] = pack('<i8di8', portion, others_demand, others)
end
return table.concat(reply)
