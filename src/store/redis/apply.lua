-- sluice: apply every charge of one call (each counter's algorithm decides) and commit the
-- admitted ones, atomically.
-- Mirrors src/algorithm/*.rs exactly, in microseconds (Redis TIME's resolution).
--
-- One run applies one call, or a batch of concurrent calls one after the other, each
-- all-or-nothing on its own (see batch.rs).
-- KEYS: the distinct counter keys of the calls (one slot in Redis Cluster).
-- ARGV: one binary string per call (struct.pack '<i8...': little-endian 64-bit integers, read
-- in C by struct.unpack, where a decimal argument each would cost a RESP header and a
-- tonumber): now in microseconds, or -1 for Redis's own clock (TIME; the production setting,
-- so clock skew between replicas cannot over-admit; with a caller's clock, used by tests, keys
-- expire an hour of Redis time after their state goes idle, at the earliest); the number of
-- charges; then 7 fields per charge: key index (into KEYS), algorithm + 8 * recording
-- (algorithm: 0 fixed_window, 1 sliding_window, 2 sliding_log, 3 token_bucket, 4 a fixed window
-- its key names: envoyproxy/ratelimit's key layout, or a calendar limit's local day, week, month
-- or year; recording: 0 only admitted hits count, 1 every charge is recorded even past the
-- limit, 2 the same with envoyproxy/ratelimit's judgment of a check, see src/algorithm/mod.rs's
-- Recording), requests, window (us), burst, cost (0 = check), gate + 65536 * extra (gate: 0 enforced,
-- 1 advisory, 2 + g a charge of quota-mode group g: one group per quota-mode descriptor, over
-- when any of its charges is denied; extra: hits a replica asks to lease beyond the cost, leased
-- up to what still fits if the charge is admitted and its call committed, see lease.rs).
-- For 4 the key names the window (compat_keys.rs, keys.rs), so window is the key's expiry in
-- seconds and burst the microseconds left in the window, both from sluice's clock: Redis's
-- clock never places such a window.
-- Reply: one binary string, 4 little-endian 64-bit integers per charge, calls in order:
--        admitted (1 + 2 * the extra hits leased, or 0), remaining (after the cost and the
--        lease), reset_after (us), available (the hits that would have fit; meaningful for
--        denied charges).
--
-- State per key: fixed_window hash {s = window start, n = count}; sliding_window hash
-- {s = window start, p = previous, c = current}; token_bucket string "hi:lo" (theoretical
-- arrival time hi + lo/requests us); sliding_log sorted set, score = admission time, member
-- "cum:hits" (cum = hits logged up to and including the entry, so a total is two lookups);
-- envoyproxy/ratelimit's fixed window a plain integer (INCRBY), as it keeps it.

-- Constants are written as powers (2^24 the limb base of the exact wide arithmetic below, 2^53
-- the bound below which doubles hold every integer exactly, 2^52 us the latest arrival time a
-- bucket may store), which Lua folds into the code: a named local would be an upvalue of each
-- function using it, and every upvalue is made again on each run.
local floor, max, format = math.floor, math.max, string.format
local unpack_call, pack = struct.unpack, struct.pack

-- Lua numbers are doubles: a product such as requests * window (us) passes 2^53 for limits
-- like a million a day. Such products are compared as base-2^24 limbs instead, so every
-- decision stays exact; the fast path (both sides below 2^53) is the common case.
-- a * b + e as six base-2^24 limbs, least significant first (a, b, e integers in [0, 2^53)).
local function wide(a, b, e)
  local a0, b0, e0 = a % 2^24, b % 2^24, e % 2^24
  a, b, e = (a - a0) / 2^24, (b - b0) / 2^24, (e - e0) / 2^24
  local a1, b1, e1 = a % 2^24, b % 2^24, e % 2^24
  local a2, b2, e2 = (a - a1) / 2^24, (b - b1) / 2^24, (e - e1) / 2^24
  local l = { a0 * b0 + e0, a0 * b1 + a1 * b0 + e1, a0 * b2 + a1 * b1 + a2 * b0 + e2,
              a1 * b2 + a2 * b1, a2 * b2, 0 }
  for i = 1, 5 do
    local d = l[i] % 2^24
    l[i + 1] = l[i + 1] + (l[i] - d) / 2^24
    l[i] = d
  end
  return l
end

-- The sign of (a * b + e) - (c * d + f), exactly.
local function cmp(a, b, e, c, d, f)
  local x, y = a * b + e, c * d + f
  if x < 2^53 and y < 2^53 then
    if x < y then return -1 elseif x > y then return 1 else return 0 end
  end
  local p, q = wide(a, b, e), wide(c, d, f)
  for i = 6, 1, -1 do
    if p[i] ~= q[i] then
      if p[i] < q[i] then return -1 else return 1 end
    end
  end
  return 0
end

-- floor((a * b + e) / c), exactly, for a result below 2^52.
local function div(a, b, e, c)
  local q = floor((a * b + e) / c)
  if a * b + e < 2^53 then return q end
  while q > 0 and cmp(q, c, 0, a, b, e) > 0 do q = q - 1 end
  while cmp(q + 1, c, 0, a, b, e) <= 0 do q = q + 1 end
  return q
end

-- ceil((a * b + e) / c), exactly, for a result below 2^52.
local function div_up(a, b, e, c)
  local x = a * b + e
  if x < 2^53 then
    -- div's fast path, and q * c <= x: the comparison is exact too.
    local q = floor(x / c)
    if q * c < x then q = q + 1 end
    return q
  end
  local q = div(a, b, e, c)
  if cmp(q, c, 0, a, b, e) < 0 then q = q + 1 end
  return q
end

-- floor((a * b + e) / c) and (a * b + e) mod c: exact even when a * b passes 2^53.
local function divmod(a, b, e, c)
  local x = a * b + e
  if x < 2^53 then
    local q = floor(x / c) -- div's fast path
    return q, x - q * c
  end
  local q = div(a, b, e, c)
  local p, s = wide(a, b, e), wide(q, c, 0)
  local v, borrow = {}, 0
  for i = 1, 3 do
    local l = p[i] - s[i] - borrow
    if l < 0 then l, borrow = l + 2^24, 1 else borrow = 0 end
    v[i] = l
  end
  return q, v[1] + v[2] * 2^24 + v[3] * 2^24 * 2^24
end

local function window_start(now, w)
  local r = now % w
  if r < 0 then r = r + w end
  return now - r
end

-- Each algorithm: decide(state, now, n, w, b, cost, k) -> admitted, remaining, reset_after,
-- next (the state to store if the call is committed; nil for checks and denials).
-- The hot paths of fixed, sliding and bucket spell out window_start and math.max: each
-- function call there cost 2-3% of a call's time in the script.

local function fixed(st, now, n, w, b, cost)
  local start, count = now - now % w, 0 -- window_start(now, w)
  if start > now then start = start - w end
  -- A state from a later window (Redis's clock stepped back) keeps counting in that window.
  if st and st.s >= start then start, count = st.s, st.n end
  local reset = start + w - now
  local charge = cost
  if charge < 1 then charge = 1 end
  if count + charge > n then return false, 0, reset end
  count = count + cost
  local next
  if cost > 0 then next = { s = start, n = count } end
  return true, n - count, reset, next
end

-- A window its key names (envoyproxy/ratelimit's layout, a calendar window): the key is this
-- window's counter; `left` is the time left in it (us).
local function compat_fixed(st, now, n, ttl, left, cost)
  local count = 0
  if st then count = st.n end
  if count + max(cost, 1) > n then return false, 0, left end
  count = count + cost
  local next
  if cost > 0 then next = { n = count } end
  return true, n - count, left, next
end

-- Smallest offset x in [0, w) at which p * (w - x) <= left * w; nil if none.
local function first_fit_in(p, left, w)
  if left < 0 then return nil end
  if p == 0 or left >= p then return 0 end
  local weight = div(left, w, 0, p)
  if weight == 0 then return nil end
  return w - weight
end

local function sliding(st, now, n, w, b, cost)
  local start, p, c = now - now % w, 0, 0 -- window_start(now, w)
  if start > now then start = start - w end
  if st then
    if st.s >= start then start, p, c = st.s, st.p, st.c
    elseif st.s + w == start then p = st.c end
  end
  local charge = cost
  if charge < 1 then charge = 1 end
  -- The previous window's weight: the part of it the sliding window still covers (all of it
  -- when the window starts after now: Redis's clock stepped back).
  local weight = w
  if now > start then weight = w - (now - start) end
  local left = n - c - charge
  if left < 0 or cmp(p, weight, 0, left, w, 0) > 0 then
    local retry
    if charge > n then
      if c > 0 then retry = 2 * w else retry = w end
    else
      retry = first_fit_in(p, left, w)
      if retry == nil then
        local x = first_fit_in(c, n - charge, w)
        if x then retry = w + x else retry = 2 * w end
      end
    end
    return false, 0, max(start + retry - now, 0)
  end
  -- floor(((n - c - cost) * w - p * weight) / w) = n - c - cost - ceil(p * weight / w)
  local remaining = n - c - cost - div_up(p, weight, 0, w)
  c = c + cost
  local reset = 0
  if c > 0 then reset = start + 2 * w - now elseif p > 0 then reset = start + w - now end
  if reset < 0 then reset = 0 end
  local next
  if cost > 0 then next = { s = start, p = p, c = c } end
  return true, remaining, reset, next
end

local function bucket(st, now, n, w, b, cost)
  local charge = cost
  if charge < 1 then charge = 1 end
  -- The debt (tat - now, scaled by n) is d * n + lo with 0 <= lo < n; 0 for a full bucket.
  local d, lo = 0, 0
  if st and st.hi >= now then d, lo = st.hi - now, st.lo end
  local full = d -- ceil(debt / n): microseconds until the bucket is full
  if lo > 0 then full = d + 1 end
  if n == 0 or charge > b then
    if n > 0 and full > 0 then return false, 0, full end
    return false, 0, window_start(now, w) + w - now
  end
  local k = b - charge
  if cmp(d, n, lo, k, w, 0) > 0 then
    -- ceil((debt - k * w) / n) = d - floor((k * w - lo) / n)
    return false, 0, d - (div(k, w, n - lo, n) - 1)
  end
  -- floor((b * w - debt - cost * w) / w) = b - cost - ceil(debt / w)
  local remaining = b - cost - div_up(d, n, lo, w)
  if cost == 0 then return true, remaining, full end
  -- The new arrival time: (now + d) + (lo + cost * w) / n.
  if now + d + (cost * w + lo) / n >= 2^52 then
    -- Absurd limits (a refill longer than ~70 years) are denied rather than stored inexactly.
    return false, 0, max(full, 1)
  end
  local q, r = divmod(cost, w, lo, n)
  local hi = now + d + q
  local reset = hi - now
  if r > 0 then reset = reset + 1 end
  return true, remaining, reset, { hi = hi, lo = r }
end

local function parse(member)
  local cum, hits = string.match(member, '^(%d+):(%d+)$')
  return tonumber(cum), tonumber(hits)
end

local function sliding_log(st, now, n, w, b, cost, k)
  local charge, t = max(cost, 1), st.t
  local total = st.total + st.add
  local newest_expiry
  if st.add > 0 then newest_expiry = t + w elseif total > 0 then newest_expiry = st.at + w end
  if charge > n then
    return false, 0, max((newest_expiry or (window_start(now, w) + w)) - now, 0)
  end
  if total + charge > n then
    -- Fits once `need` of the oldest hits have left the window: walk the live entries oldest
    -- first (this call's own pending hits at t come last, expiring at t + w).
    local need, retry = total - (n - charge), newest_expiry
    local offset, found = 0, false
    while st.at and not found do
      local page = redis.call('ZRANGEBYSCORE', KEYS[k], '(' .. format('%d', t - w), '+inf', 'WITHSCORES',
        'LIMIT', offset, 64)
      if #page == 0 then break end
      for i = 1, #page, 2 do
        if parse(page[i]) - st.base >= need then
          retry, found = tonumber(page[i + 1]) + w, true
          break
        end
      end
      offset = offset + 64
    end
    return false, 0, max(retry - now, 0)
  end
  if cost == 0 then
    local reset = 0
    if newest_expiry then reset = max(newest_expiry - now, 0) end
    return true, n - total, reset
  end
  local next = {}
  for f, v in pairs(st) do next[f] = v end
  next.add = st.add + cost
  return true, n - total - cost, max(t + w - now, 0), next
end

-- Loading: the stored state of one key (false when absent).

-- The log as seen at t = max(now, newest admission): its live total, the cumulative count
-- before its oldest live entry (base), and the newest entry; add = hits this call appends.
local function log_load(key, now, w)
  local st = { t = now, total = 0, base = 0, add = 0 }
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[1] then
    local at = tonumber(newest[2])
    st.t = max(now, at)
    if at > st.t - w then
      local first = redis.call('ZRANGEBYSCORE', key, '(' .. format('%d', st.t - w), '+inf', 'LIMIT', 0, 1)
      local fcum, fhits = parse(first[1])
      local cum, hits = parse(newest[1])
      st.base = fcum - fhits
      st.total = cum - st.base
      st.at, st.cum, st.hits, st.member = at, cum, hits, newest[1]
    end
  end
  return st
end

-- An O(1) state is read once per run (later calls see the run's own commits in `latest`); a
-- log afresh by each call that names it (its summary is derived from the time). load is
-- called for a key whose latest[k] is nil.
local latest = {} -- latest[k]: k's state as the run's commits so far leave it
local function load(k, alg, now, w)
  if alg == 2 then return log_load(KEYS[k], now, w) end
  local st = false
  if alg == 0 then
    local v = redis.call('HMGET', KEYS[k], 's', 'n')
    if v[1] then st = { s = tonumber(v[1]), n = tonumber(v[2]) } end
  elseif alg == 1 then
    local v = redis.call('HMGET', KEYS[k], 's', 'p', 'c')
    if v[1] then st = { s = tonumber(v[1]), p = tonumber(v[2]), c = tonumber(v[3]) } end
  elseif alg == 4 then
    local v = redis.call('GET', KEYS[k])
    if v then st = { n = tonumber(v) } end
  else
    local v = redis.call('GET', KEYS[k])
    if v then
      local hi, lo = string.match(v, '^(%d+):(%d+)$')
      st = { hi = tonumber(hi), lo = tonumber(lo) }
    end
  end
  latest[k] = st
  return st
end

-- Storing: expiry is set when a window starts (fixed, sliding) or when the key would expire
-- too early (log); the bucket's one SET carries its expiry.

-- Expiry in whole milliseconds, never early. With the caller's clock (tests) that time is not
-- Redis's, so keys are kept at least an hour of Redis time instead.
local CALLER_CLOCK = unpack_call('<i8', ARGV[1]) >= 0
local function ms(us)
  local t = floor(us / 1000) + 1
  if CALLER_CLOCK and t < 3600000 then return 3600000 end
  return t
end

local function log_store(key, st, now, w)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', st.t - w))
  local cum, hits = st.add, st.add
  if st.at then
    cum = st.cum + st.add
    if st.at == st.t then
      redis.call('ZREM', key, st.member)
      hits = st.hits + st.add
    end
  end
  redis.call('ZADD', key, format('%d', st.t), format('%d', cum) .. ':' .. format('%d', hits))
  -- Idle once the newest entry leaves the window; extend by a window at a time.
  local need = ms(st.t + w - now)
  if redis.call('PTTL', key) < need then redis.call('PEXPIRE', key, need + ms(w)) end
end

-- A commit of an O(1) state is written once per key at the end of the run (its last state,
-- against the state the run found), not once per call: nothing else runs during a script, and
-- each write replaces the whole state (its expiry is set when its window starts, and a later
-- write of the same window leaves it), so the key ends as the calls' writes in order would
-- leave it, for one write instead of one a call. A log appends per call.
-- dirty[k]: how k's last commit is written: alg, w, the expiry's base, and the state the run
-- found (old: the write compares with it).
local dirty = {}
local function commit(k, alg, w, now, st)
  if alg == 2 then
    log_store(KEYS[k], st, now, w)
    return
  end
  local before, d = latest[k], dirty[k]
  if not d then
    -- All its fields at once (one allocation; added one by one they regrow the table).
    d = { old = before, start = false, alg = alg, w = w, now = now }
    dirty[k] = d
  end
  -- The expiry is the one the calls' own writes would leave: a window's is set by the call
  -- that starts it (`start`), a bucket's by the last write (`now`).
  if not before or before.s ~= st.s then d.start = now end
  d.alg, d.w, d.now = alg, w, now
  latest[k] = st
end

-- A check (cost 0) judged as envoyproxy/ratelimit judges a call of 0 hits (recording 2):
-- refused only once the counter is past the limit, which is one hit judged against a bound one
-- larger (a bucket's burst, a window's requests), its remaining one less.
local function compat_check(decide, alg, st, now, n, w, b, k)
  local ok, remaining, reset
  if alg == 3 then ok, remaining, reset = decide(st, now, n, w, b + 1, 0, k)
  else ok, remaining, reset = decide(st, now, n + 1, w, b, 0, k) end
  if ok then remaining = remaining - 1 end
  return ok, remaining, reset
end

-- The state a charge leaves when recorded past its limit: the algorithm's under a bound no
-- counter reaches (2^48, src/algorithm/mod.rs's UNBOUNDED); nil when not even that admits it.
local function recorded(decide, alg, st, now, n, w, b, cost, k)
  local _, over
  if alg == 3 then _, _, _, over = decide(st, now, n, w, 2^48, cost, k)
  else _, _, _, over = decide(st, now, 2^48, w, b, cost, k) end
  return over
end

-- One charge against state st (nil when absent) with recording rec: admitted (false or 1 + 2 *
-- the extra hits leased), remaining, reset_after and available as the reply gives them, the
-- state to commit (nil for none; for a charge recorded past its limit, its state even though
-- denied, its reset_after when the same charge fits it), and the remaining and reset_after the
-- charge had without its lease.
local function charge(alg, st, now, n, w, b, cost, gate, k, rec)
  local decide
  if alg == 0 then decide = fixed elseif alg == 1 then decide = sliding
  elseif alg == 2 then decide = sliding_log elseif alg == 4 then decide = compat_fixed
  else decide = bucket end
  local ok, remaining, reset, next
  if cost == 0 and rec == 2 then ok, remaining, reset = compat_check(decide, alg, st, now, n, w, b, k)
  else ok, remaining, reset, next = decide(st, now, n, w, b, cost, k) end
  if not ok then
    local fits, left
    if rec == 2 then fits, left = compat_check(decide, alg, st, now, n, w, b, k)
    else fits, left = decide(st, now, n, w, b, 0, k) end
    if not fits then left = 0 end
    if rec > 0 and cost > 0 then
      local over = recorded(decide, alg, st, now, n, w, b, cost, k)
      if over then
        local _, _, again = decide(over, now, n, w, b, cost, k)
        return false, remaining, again, left, over
      end
    end
    return false, remaining, reset, left
  end
  local available = remaining + cost
  if next and gate >= 65536 and remaining > 0 then
    -- A lease: `remaining` more hits fit now, so cost + leased is admitted as one charge.
    local leased = math.min(floor(gate / 65536), remaining)
    local ok2, remaining2, reset2, next2 = decide(st, now, n, w, b, cost + leased, k)
    if ok2 and next2 then
      return 1 + 2 * leased, remaining2, reset2, available, next2, remaining, reset
    end
  end
  return 1, remaining, reset, available, next
end

-- Apply each call in turn: every charge in order (a key named twice sees its own earlier
-- charge), then commit the admitted ones only if the call is not blocked (src/store/gate.rs:
-- an enforced charge denied, or quota-mode groups present and each with a denied charge); a
-- descriptor whose charge crossed a limit recording every charge (recording > 0, denied) keeps
-- its hits on each such limit of it whatever the call's fate.
-- Later calls of a batch see earlier calls' commits, exactly as separate runs in that order
-- would. Dispatch is by plain comparisons: a script's body (and every table and closure in
-- it) is rebuilt on each run.
local reply, replies = {}, 0
local server_now -- Redis's clock, read once per run for the calls that bring no time
-- A call of several charges keeps its own view: pending[k] is k's state after the call's
-- charges so far, commit_alg[k] / commit_w[k] are set when the call would commit k, kept[k] is
-- k's state after its last charge of a recording limit and kept_desc[k] that charge's
-- descriptor (committed even if the call is blocked, when crossed[descriptor]: a recording
-- charge of it was denied). Made by
-- the run's first such call (not per call: new tables cost) and cleared of the keys a call
-- touched (touched[1..nt]) after it.
local pending, commit_alg, commit_w, kept, kept_desc, crossed, touched
-- The last call's argument and its header and first charge (one unpack): a call identical to
-- the one before it (a hot key on Redis's clock: the largest runs) is not unpacked again (Lua
-- strings are interned, so the comparison is one of pointers).
local last, time, count, k, alg, n, w, b, cost, gate, o
local rec = 0 -- the charge's recording (see the header), split from its algorithm field
local desc = 0 -- its descriptor's index in the call, split from its gate field
for call = 1, #ARGV do
  local packed = ARGV[call]
  if packed ~= last then
    last = packed
    if #packed > 16 then
      time, count, k, alg, n, w, b, cost, gate, o = unpack_call('<i8i8i8i8i8i8i8i8i8', packed)
      rec, desc = 0, 0
      if alg >= 8 then rec, alg = floor(alg / 8), alg % 8 end
      if gate >= 2^40 then desc, gate = floor(gate / 2^40), gate % 2^40 end
    else
      time, count = unpack_call('<i8i8', packed)
    end
  end
  local now = time
  if now < 0 then
    if not server_now then
      local t = redis.call('TIME')
      server_now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = server_now
  end
  if count == 1 then
    -- One charge (the common call): it is committed exactly when admitted, whatever its gate,
    -- so it needs no view; a blocked call has no lease to withdraw.
    local st = latest[k]
    if st == nil then st = load(k, alg, now, w) end
    local admitted, remaining, reset, available, next = charge(alg, st or nil, now, n, w, b,
      cost, gate, k, rec)
    if next then commit(k, alg, w, now, next) end
    replies = replies + 1
    reply[replies] = pack('<i8i8i8i8', admitted or 0, remaining, reset, available)
  elseif count > 1 then
    if not pending then
      pending, commit_alg, commit_w, kept, kept_desc, touched = {}, {}, {}, {}, {}, {}
    end
    local crossed_any = false
    local nt = 0
    local blocked, quota_mode_over = false, nil -- quota_mode_over[g]: group g has a denied charge
    -- Leasing charges (reply slot, remaining and reset_after without the lease), to withdraw
    -- if the call is blocked.
    local leases, ng = nil, 0
    -- The later charges are unpacked over the first's fields: the next call unpacks afresh.
    last = nil
    for j = 1, count do
      if j > 1 then
        k, alg, n, w, b, cost, gate, o = unpack_call('<i8i8i8i8i8i8i8', packed, o)
        rec, desc = 0, 0
        if alg >= 8 then rec, alg = floor(alg / 8), alg % 8 end
        if gate >= 2^40 then desc, gate = floor(gate / 2^40), gate % 2^40 end
      end
      if pending[k] == nil then
        local st = latest[k]
        if st == nil then st = load(k, alg, now, w) end
        pending[k] = st
        nt = nt + 1
        touched[nt] = k
      end
      local admitted, remaining, reset, available, next, remaining0, reset0 = charge(alg,
        pending[k] or nil, now, n, w, b, cost, gate, k, rec)
      gate = gate % 65536
      if remaining0 then
        leases = leases or {}
        leases[ng + 1], leases[ng + 2], leases[ng + 3], leases[ng + 4] = replies + 1, remaining0,
          reset0, available
        ng = ng + 4
      end
      if next then
        pending[k], commit_alg[k], commit_w[k] = next, alg, w
        if rec > 0 then
          kept[k], kept_desc[k] = next, desc
          if not admitted then
            crossed = crossed or {}
            crossed[desc], crossed_any = true, true
          end
        end
      end
      if gate == 0 and not admitted then blocked = true end
      if gate >= 2 then
        quota_mode_over = quota_mode_over or {}
        quota_mode_over[gate] = quota_mode_over[gate] or not admitted
      end
      replies = replies + 1
      reply[replies] = pack('<i8i8i8i8', admitted or 0, remaining, reset, available)
    end
    if quota_mode_over and not blocked then
      blocked = true
      for _, over in pairs(quota_mode_over) do
        if not over then blocked = false end
      end
    end
    if blocked and leases then
      -- Nothing of a blocked call is committed: its leases are withdrawn.
      for i = 1, ng, 4 do
        reply[leases[i]] = pack('<i8i8i8i8', 1, leases[i + 1], leases[i + 2], leases[i + 3])
      end
    end
    for i = 1, nt do
      local k = touched[i]
      local alg = commit_alg[k]
      if alg then
        if not blocked then commit(k, alg, commit_w[k], now, pending[k])
        elseif crossed_any and kept[k] and crossed[kept_desc[k]] then
          commit(k, alg, commit_w[k], now, kept[k])
        end
        commit_alg[k], kept[k] = nil, nil -- (commit_w[k] and kept_desc[k] are read only with them)
      end
      pending[k] = nil
    end
    if crossed_any then crossed = nil end
  end
end
-- Each O(1) key's last commit, written once (see commit); written out here, not as a function
-- per algorithm, as every closure is made again on each run.
for k, d in pairs(dirty) do
  local key, old, st, w = KEYS[k], d.old, latest[k], d.w
  if d.alg == 0 then
    if old and old.s == st.s then
      redis.call('HSET', key, 'n', format('%d', st.n))
    else
      redis.call('HSET', key, 's', format('%d', st.s), 'n', format('%d', st.n))
      redis.call('PEXPIRE', key, ms(st.s + w - d.start))
    end
  elseif d.alg == 1 then
    if old and old.s == st.s then
      redis.call('HSET', key, 'c', format('%d', st.c))
    else
      redis.call('HSET', key, 's', format('%d', st.s), 'p', format('%d', st.p), 'c', format('%d', st.c))
      redis.call('PEXPIRE', key, ms(st.s + 2 * w - d.start))
    end
  elseif d.alg == 4 then
    -- As envoyproxy/ratelimit: INCRBY by the hits, then EXPIRE (w = window + jitter, or a
    -- calendar window's time left + slack, in seconds) on every hit.
    local before = 0
    if old then before = old.n end
    redis.call('INCRBY', key, format('%d', st.n - before))
    if CALLER_CLOCK and w < 3600 then w = 3600 end
    redis.call('EXPIRE', key, format('%d', w))
  else
    local reset = st.hi - d.now
    if st.lo > 0 then reset = reset + 1 end
    redis.call('SET', key, format('%d', st.hi) .. ':' .. format('%d', st.lo), 'PX', ms(reset))
  end
end
return table.concat(reply)
