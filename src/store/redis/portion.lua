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
--   0..=1000000), demand (d), held (i8, ppm), longer (i8, us: how much longer than ttl and
--   member for its portion and floor are reserved, for shares that live longer).
-- Reply: one binary string, per bucket: the portion (i8, ppm), the others' demand (d), the number
--   of other replicas holding a live portion (i8), the floor (i8, ppm), settling (i8, 0 or 1).
local unpack_args, pack, format, match = struct.unpack, struct.pack, string.format, string.match
local min, max, ceil, floor = math.min, math.max, math.ceil, math.floor
local replica, packed = ARGV[1], ARGV[2]

-- Region mode (ARGV[3], the region's name): the same claim one level up, a region's replica in
-- the global store regions share (docs/regions.md). KEYS[1] is the members' hash, KEYS[2..] the
-- units' hashes (all one slot). Fields are named "<region>|<replica>"; a region holds the
-- largest portion (or floor) any of its live replicas holds.
--   A member field: "floor reserve pending since heard": the floor the replica may use (ppm),
--   what the others must leave it (its floor, the floor it said it enforces, a pending raise),
--   a raise waiting to be usable and since when (us), when it last claimed (us).
--   A unit field: "portion reserve expiry demand": the portion granted, what the others must
--   leave it (the portion or what the replica said it enforces, the larger), when both lapse,
--   the replica's demand (hits/s).
-- ARGV[2]: now (i8, us; -1 for TIME), member ttl, settle (us), the floor asked, the floor held
--   (ppm), then per unit: demand (d), the whole limit's rate (d, hits/s), the portion held
--   (i8, ppm), ttl (i8, us).
-- Reply: the floor (i8, ppm), the members (i8) and the region's live replicas (i8), then per unit: the portion (i8, ppm), the
--   region's demand (d), the other regions' demand (d), the other regions holding it (i8).
local function group_of(field) return match(field, '^([^|]+)|') end

-- The region's max-min fair part (ppm) of what `free` ppm of a limit of `rate` leaves,
-- `demands[1]` its own demand: everyone's demand and an equal part of the rest when it covers
-- all; else the water level.
local function fair_share(demands, rate, free)
  local n, mine, total = #demands, demands[1], 0
  if rate <= 0 then return math.floor(free / n) end
  local room = rate * free / 1000000
  for _, d in ipairs(demands) do total = total + d end
  local share
  if total <= room then
    share = (mine + (room - total) / n) / rate
  else
    table.sort(demands)
    local left, level = room, 0
    for k, d in ipairs(demands) do
      level = left / (n - k + 1)
      if d > level then break end
      left = left - d
    end
    share = min(mine, level) / rate
  end
  return max(0, min(1000000, math.floor(share * 1000000)))
end

local function claim_for_region(region)
  local me = region .. '|' .. replica
  local now, member_ttl, settle, want, floor_held, at = unpack_args('<i8i8i8i8i8', packed)
  if now < 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  -- Members: drop the silent, sum what the other regions' floors reserve.
  local fields = redis.call('HGETALL', KEYS[1])
  local reserve_of, usable_here, here, mine, dead = {}, 0, 1, nil, {}
  for j = 1, #fields, 2 do
    local who = fields[j]
    local floor, reserve, pending, since, heard =
      match(fields[j + 1], '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
    local group = group_of(who)
    heard = tonumber(heard)
    if group == nil or heard == nil or heard + member_ttl <= now then
      dead[#dead + 1] = who
    elseif who == me then
      mine = { tonumber(floor), tonumber(pending), tonumber(since) }
    else
      reserve_of[group] = max(reserve_of[group] or 0, tonumber(reserve))
      if group == region then
        usable_here = max(usable_here, tonumber(floor))
        here = here + 1
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', KEYS[1], unpack(dead)) end
  local members, floors = 1, 0
  for group, reserve in pairs(reserve_of) do
    if group ~= region then
      members = members + 1
      floors = floors + reserve
    end
  end
  -- A replica the store does not know (new, or the store lost its data) gets back at once the
  -- floor it still enforces; any other raise waits until every portion granted before it lapsed.
  local target = max(0, min(want, 1000000 - floors))
  local floor, pending, since = min(target, floor_held), min(target, floor_held), now
  if mine ~= nil then floor, pending, since = mine[1], mine[2], mine[3] end
  if target <= floor or target <= usable_here then
    floor, pending = target, target
  else
    if target > pending then
      pending, since = target, now
    elseif target < pending then
      pending = target
    end
    if now >= since + settle then floor = pending end
  end
  redis.call('HSET', KEYS[1], me,
    format('%d %d %d %d %d', floor, max(floor, floor_held, pending), pending, since, now))
  redis.call('PEXPIRE', KEYS[1], max(1, ceil(member_ttl / 1000)))
  local reply = { pack('<i8i8i8', floor, members, here) }
  for i = 2, #KEYS do
    local key = KEYS[i]
    local demand, rate, held, ttl
    demand, rate, held, ttl, at = unpack_args('<ddi8i8', packed, at)
    local expiry = now + min(ttl, settle)
    local unit = redis.call('HGETALL', key)
    local hold, asked, longest, gone = {}, {}, expiry, {}
    for j = 1, #unit, 2 do
      local who = unit[j]
      if who ~= me then
        local reserve, until_us, their = match(unit[j + 1], '^%d+ (%d+) (%d+) (%S+)$')
        local group = group_of(who)
        reserve, until_us = tonumber(reserve), tonumber(until_us)
        if group == nil or reserve == nil or until_us == nil or until_us <= now then
          gone[#gone + 1] = who
        else
          hold[group] = max(hold[group] or 0, reserve)
          asked[group] = (asked[group] or 0) + (tonumber(their) or 0)
          longest = max(longest, until_us)
        end
      end
    end
    if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
    local region_demand = demand + (asked[region] or 0)
    -- Each other member holds its live portion or its floor, whichever is larger; those without
    -- a live portion here sit out the sharing on their floor, the others share the rest by
    -- demand (each asking at least its floor).
    local taken, idle, others, others_demand = 0, 0, 0, 0
    local demands = { max(region_demand, rate * max(floor, usable_here) / 1000000) }
    for group, reserve in pairs(reserve_of) do
      if group ~= region then
        taken = taken + max(reserve, hold[group] or 0)
        if hold[group] == nil then idle = idle + reserve end
      end
    end
    for group, h in pairs(hold) do
      if group ~= region then
        if reserve_of[group] == nil then taken = taken + h end
        others = others + 1
        others_demand = others_demand + asked[group]
        demands[#demands + 1] = max(asked[group], rate * (reserve_of[group] or 0) / 1000000)
      end
    end
    local fair = fair_share(demands, rate, max(0, 1000000 - idle))
    local portion = max(0, min(fair, 1000000 - taken))
    redis.call('HSET', key, me, format('%d %d %d %.17g', portion, max(portion, held), expiry, demand))
    redis.call('PEXPIRE', key, max(1, ceil((longest - now) / 1000)))
    reply[#reply + 1] = pack('<i8ddi8', portion, region_demand, others_demand, others)
  end
  return table.concat(reply)
end

if ARGV[3] then return claim_for_region(ARGV[3]) end

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
local reply = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  local wanted, demand, held, longer
  wanted, demand, held, longer, at = unpack_args('<i8di8i8', packed, at)
  longer = max(0, longer)
  local portion_until, member_until = now + ttl + longer, now + max(ttl, member_for) + longer
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
