-- sluice: one replica's claim of its portions of RLQS limits, atomically per bucket.
--
-- Each bucket is one hash, one field per replica, its value
-- "<portion> <member until> <demand>;<floor>;<portion until>": the part of the limit the replica
-- holds and the part of it it keeps through an outage (both in parts per million: integers, no
-- float drift in the sum), its demand in requests per second (%.17g, so the double survives the
-- trip), and until when (us) each is reserved for it: the portion until "portion until", the
-- floor until "member until". The first two words keep the layout of earlier versions, which read
-- the whole portion as reserved until "member until": more than is, never less, so replicas of
-- both versions may share a bucket. A portion is given only here, against the reservations of
-- the other replicas, so the reservations of a bucket never sum past 1000000.
--
-- KEYS[1]: the store's marker (one per Redis Cluster slot): since when (us) it holds portions.
--   Missing, the store is new or lost its portions (a restart without them): for "settle" after
--   that, no claim gets more than the replica declares it holds, until every live replica has
--   claimed once and so declared what it still has out.
-- KEYS[2..]: the bucket hashes (one slot on Redis Cluster, the marker's).
-- ARGV[1]: the replica's name. ARGV[2]: one binary string of little-endian fields (struct):
--   now (i8, us; -1 for Redis's own clock, TIME), ttl (i8, us: how long a portion is reserved),
--   member for (i8, us: how long a floor is), settle (i8, us), then per bucket: wanted (i8, ppm,
--   0..=1000000), demand (d), held (i8, ppm).
-- Reply: one binary string, per bucket: the portion (i8, ppm), the others' demand (d), the number
--   of other replicas holding a live portion (i8), the floor (i8, ppm), settling (i8, 0 or 1).
local unpack_args, pack, format, match = struct.unpack, struct.pack, string.format, string.match
local min, max, ceil, floor = math.min, math.max, math.ceil, math.floor
local replica, packed = ARGV[1], ARGV[2]
local now, ttl, member_for, settle, at = unpack_args('<i8i8i8i8', packed)
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local mark, since = redis.call('GET', KEYS[1]), 0
if mark then
  since = tonumber(mark) or 0
else
  since = now
  redis.call('SET', KEYS[1], now)
end
local settling = now < since + settle
local portion_until, member_until = now + ttl, now + max(ttl, member_for)
local reply = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  local wanted, demand, held
  wanted, demand, held, at = unpack_args('<i8di8', packed, at)
  local fields = redis.call('HGETALL', key)
  local reserved, others_demand, others, members = 0, 0, 0, 1
  local longest, dead = member_until, {}
  for j = 1, #fields, 2 do
    local who = fields[j]
    if who ~= replica then
      local held_by, until_us, rest = match(fields[j + 1], '^(%d+) (%d+) (%S+)$')
      held_by, until_us = tonumber(held_by), tonumber(until_us)
      if held_by == nil or until_us == nil or until_us <= now then
        -- No longer a member (it stopped claiming), or not ours to read: it holds nothing.
        dead[#dead + 1] = who
      else
        local their_demand, kept, portion_us = match(rest, '^([^;]*);(%d+);(%d+)$')
        kept, portion_us = tonumber(kept), tonumber(portion_us)
        if kept == nil or portion_us == nil then
          -- An earlier version's field: its whole portion, until the end.
          their_demand, kept, portion_us = rest, held_by, until_us
        end
        members = members + 1
        longest = max(longest, until_us)
        if portion_us > now then
          reserved = reserved + held_by
          others = others + 1
          others_demand = others_demand + (tonumber(their_demand) or 0)
        else
          reserved = reserved + min(kept, held_by)
        end
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
  local cap = wanted
  if settling then cap = min(cap, held) end
  local portion = max(0, min(cap, 1000000 - reserved))
  local kept = min(portion, floor(1000000 / members))
  redis.call('HSET', key, replica,
    format('%d %d %.17g;%d;%d', portion, member_until, demand, kept, portion_until))
  -- The hash outlives its longest membership by nothing: once every replica stops, it is gone.
  redis.call('PEXPIRE', key, max(1, ceil((longest - now) / 1000)))
  reply[#reply + 1] = pack('<i8di8i8i8', portion, others_demand, others, kept, settling and 1 or 0)
end
return table.concat(reply)
