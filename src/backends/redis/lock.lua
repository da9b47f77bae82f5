-- SPDX-License-Identifier: MIT
-- lock.lua — every state change of a dlock lock on Redis, one atomic script.
--
-- KEYS[1] = "dlock:{NAME}:lock"; every other key of the lock is derived from
-- it and shares the {NAME} hash tag, so all live in one cluster slot:
--   lock   string  exclusive holder, "OWNER TOKEN SINCE N HOLDER VALUE" (N: the
--                  holder's length; PX = lease). One string, not a hash: a
--                  hand-over overwrites it with one SET ... PX.
--   token  string  fencing counter (INCR), never expires
--   q      list    fair waiters in arrival order (owner ids)
--   qi     hash    owner -> "expiry kind ttl permits holder" of each queued waiter
--   w:ID   list    where the release hands waiter ID its token (it BLPOPs here)
--   ho     zset    hand-overs, "ID KIND" scored by the registration expiry of
--                  waiter ID when it was handed the lock (see take_back)
--   rd     zset    shared holders, scored by lease expiry
--   sem    zset    semaphore holders, scored by lease expiry
--   sn     string  the permits of the semaphore in force (meaningful while
--                  sem has live members: one name is one lock, so a taker
--                  asking other permits is refused, {-1, permits})
--   nfw    zset    non-fair waiters, scored by expiry of their registration
--   sig    list    one wake-up for one non-fair waiter
-- ARGV[1] is the operation; kinds are x (exclusive), r (shared), s (semaphore).
-- The key= layout (keyed.c, docs/redis.md) passes four keys instead: the
-- lock key a template made, KEY/dlock-token (counter), KEY/dlock-wait
-- (waiters, zset) and KEY/dlock-wake (a channel); its operations start
-- with k, and no operation runs on the other layout's keys.
-- Times are the server's own clock (TIME), in milliseconds.
--
-- The file defines main(KEYS, ARGV) and is loaded one of two ways (conn.c):
-- as a Redis 7 function library (FUNCTION LOAD, called with FCALL), where
-- everything at the top level runs once at load and a call runs main only;
-- or, on older servers, as a script (SCRIPT LOAD, EVALSHA) with "return
-- main(KEYS, ARGV)" appended, where the whole file runs on every call.
-- So the state of one call lives in the variables below, set by main.

local P, LOCK, TOKEN, Q, QI, RD, SEM, NFW, SIG, SN, HO
-- The server's clock in ms, read on first use (release and renew of an
-- exclusive lock never need it).
local now_ms
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
-- Members of the sorted sets carry their own expiry; expired ones are
-- dropped the first time a set is looked at in a call (and never otherwise,
-- to keep the common paths short).
local purged
local function live(set)
  if not purged then purged = {} end
  if not purged[set] then
    redis.call('ZREMRANGEBYSCORE', set, '-inf', now())
    purged[set] = true
  end
  return set
end

local function count(set)
  if redis.call('EXISTS', set) == 0 then return 0 end
  return redis.call('ZCARD', live(set))
end

-- The fields of a holder's string s, or nil when s is not one dlock wrote
-- (another library's value: a key= lock held by a peer).
local function parse(s)
  local owner, tok, since, n, at = string.match(s, '^(%x+) (%d+) (%d+) (%d+) ()')
  if not owner then return nil end
  n = tonumber(n)
  return {owner = owner, token = tonumber(tok), since = tonumber(since),
          holder = string.sub(s, at, at + n - 1), value = string.sub(s, at + n)}
end

-- The exclusive holder's fields, or nil when nobody holds it exclusively.
local function xlock()
  local s = redis.call('GET', LOCK)
  if not s then return nil end
  return parse(s)
end

-- What is at LOCK when dlock did not put it there: its type ('string' for a
-- string dlock did not write), else nil. In dlock's own layout such a key
-- is refused, not waited on: another library was pointed at dlock's key.
local function alien()
  local t = redis.call('TYPE', LOCK).ok
  if t == 'none' then return nil end
  if t ~= 'string' or not parse(redis.call('GET', LOCK)) then return t end
  return nil
end

-- key= layout: the lock key's string, or false when there is none, and
-- the key's type when it is not a string (nobody's lock: refused).
local function kget()
  local s = redis.pcall('GET', LOCK)
  if type(s) == 'table' and s.err then return nil, redis.call('TYPE', LOCK).ok end
  return s
end

-- key= layout: the dlock waiters may try again. Published, not pushed to
-- a list they BLPOP: a blocked command's timeout is only as precise as the
-- server's event loop (hz 10: up to 100 ms late), and the waiters also
-- poll, for the peers' releases, which publish nothing.
local function kwake()
  if count(NFW) > 0 then redis.call('PUBLISH', SIG, '1') end
end

-- A peer's holder, for people: its value, printable and cut short.
local function peer(s)
  local v = string.gsub(string.sub(s, 1, 64), '[%z\1-\31\127-\255"\\]', '?')
  return 'a client of another library (value "' .. v .. '")'
end

local function alien_reply(t)
  return redis.error_reply('DLOCKTYPE ' .. t)
end

-- The exclusive holder's owner id only (false when none): the common check.
local function xowner()
  local s = redis.call('GET', LOCK)
  return s and string.match(s, '^%S+')
end

local function xstring(owner, tok, since, holder, value)
  return owner .. ' ' .. tok .. ' ' .. since .. ' ' .. #holder .. ' ' .. holder .. value
end

-- The permits of the semaphore in force when they are not `permits`, else nil.
local function sem_other(permits)
  if count(SEM) == 0 then return nil end
  local n = tonumber(redis.call('GET', SN) or permits)
  if n ~= permits then return n end
  return nil
end

-- One name is one lock: a writer excludes everyone, readers and semaphore
-- holders exclude writers and each other (and a semaphore of other permits).
-- no_writer: the caller just saw LOCK missing (saves the look).
local function free_for(kind, permits, no_writer)
  if not no_writer and redis.call('EXISTS', LOCK) == 1 then return false end
  if kind == 's' then
    return count(SEM) < permits and count(RD) == 0 and not sem_other(permits)
  end
  if kind == 'x' then return count(RD) == 0 and count(SEM) == 0 end
  return count(SEM) == 0
end

local function holds(owner, kind)
  if kind == 'x' then return xowner() == owner end
  local set = kind == 'r' and RD or SEM
  local score = redis.call('ZSCORE', set, owner)
  return score ~= false and tonumber(score) > now()
end

local function grant(owner, kind, ttl, holder, permits)
  local tok = redis.call('INCR', TOKEN)
  if kind == 'x' then
    redis.call('SET', LOCK, xstring(owner, tok, now(), holder, ''), 'PX', ttl)
  else
    if kind == 's' then redis.call('SET', SN, permits) end
    redis.call('ZADD', kind == 'r' and RD or SEM, now() + ttl, owner)
  end
  return tok
end

-- Milliseconds until whatever blocks us may expire by itself: a waiter sleeps
-- at most this long before looking again, in case a holder died silently.
local function blocker_ms(kind)
  local ms = redis.call('PTTL', LOCK)
  if ms < 0 then
    -- readers block writers and semaphores; permits block everyone else
    for _, set in ipairs(kind == 's' and {SEM, RD} or {RD, SEM}) do
      local first = redis.call('ZRANGE', live(set), 0, 0, 'WITHSCORES')
      if first[2] then
        local m = tonumber(first[2]) - now()
        if ms < 0 or m < ms then ms = m end
      end
    end
  end
  if ms < 1 then ms = 1 end
  return ms
end

-- One non-fair waiter may try again: one wake-up in SIG, which they BLPOP.
local function wake_one()
  if count(NFW) > 0 then
    redis.call('DEL', SIG)
    redis.call('RPUSH', SIG, 1)
    redis.call('PEXPIRE', SIG, 60000)
  end
end

-- Hand the lock to queued waiters, in order, as far as it can be granted:
-- one writer, or a run of readers, or as many permits as are free. A waiter
-- whose registration expired (it died while queued) is skipped.
-- releasing: the caller is the exclusive holder giving the lock back, and
-- its grant is still in LOCK. Nothing else can be in the way of the first
-- writer or reader (readers are never granted while LOCK exists), so the
-- head is popped without a look first, and a writer's grant overwrites
-- LOCK; LOCK is deleted here otherwise. This is the hand-over, the hottest
-- path: GET (owner check), LPOP, HGET, HDEL, TIME, INCR, SET, RPUSH, PEXPIRE.
local function advance(releasing)
  local to_writer = false
  while true do
    local head
    if releasing then head = redis.call('LPOP', Q) else head = redis.call('LINDEX', Q, 0) end
    if not head then break end
    local info = redis.call('HGET', QI, head)
    local exp, kind, ttl, permits, holder
    if info then
      exp, kind, ttl, permits, holder = string.match(info, '^(%d+) (%a) (%d+) (%d+) (.*)$')
    end
    if not info or tonumber(exp) < now() then
      if not releasing then redis.call('LPOP', Q) end
      if info then redis.call('HDEL', QI, head) end
    elseif releasing and kind == 's' then
      -- A semaphore waiter on this name: it needs the general look.
      redis.call('LPUSH', Q, head)
      redis.call('DEL', LOCK)
      releasing = false
    elseif releasing or free_for(kind, tonumber(permits)) then
      if not releasing then redis.call('LPOP', Q) end
      redis.call('HDEL', QI, head)
      if releasing and kind ~= 'x' then redis.call('DEL', LOCK) end
      releasing = false
      local w = P .. 'w:' .. head
      redis.call('RPUSH', w, grant(head, kind, tonumber(ttl), holder, tonumber(permits)))
      redis.call('PEXPIRE', w, 60000)
      redis.call('ZADD', HO, exp, head .. ' ' .. kind)
      redis.call('PEXPIRE', HO, 60000)
      if kind == 'x' then
        to_writer = true
        break
      end
    else
      break
    end
  end
  if releasing then redis.call('DEL', LOCK) end
  -- Non-fair waiters may try again, unless a writer holds it now.
  if not to_writer then wake_one() end
end

local function give_back(owner, kind)
  if kind == 'x' then
    if xowner() ~= owner then return 0 end
    redis.call('DEL', LOCK)
  else
    if redis.call('ZREM', kind == 'r' and RD or SEM, owner) == 0 then return 0 end
    if kind == 's' and redis.call('EXISTS', SEM) == 0 then redis.call('DEL', SN) end
  end
  return 1
end

-- Hand-overs (advance) nobody collected by the grantee's registration
-- expiry are taken back: the grantee stopped looking (it died, or gave up
-- and its abort never came), and the lock would otherwise stand idle for a
-- whole ttl while live waiters wait behind it. A live grantee collects at
-- its next look, which comes before that expiry, and collecting (BLPOP, or
-- the wait operation's LPOP) empties w:ID in one step: a grant taken back
-- was never collected, and its grantee, should it look again, only finds
-- itself a waiter.
local function take_back()
  if redis.call('EXISTS', HO) == 0 then return end
  local due = redis.call('ZRANGEBYSCORE', HO, '-inf', '(' .. now())
  if #due == 0 then return end
  for _, m in ipairs(due) do
    local owner, kind = string.match(m, '^(%S+) (%a)$')
    if owner and redis.call('LLEN', P .. 'w:' .. owner) > 0 then
      redis.call('DEL', P .. 'w:' .. owner)
      give_back(owner, kind)
    end
  end
  redis.call('ZREMRANGEBYSCORE', HO, '-inf', '(' .. now())
end

-- Milliseconds until the exclusive holder's grant may be taken back
-- (take_back), or nil when it is no hand-over or was collected: a waiter
-- looks again then.
local function uncollected_ms()
  local x = xowner()
  if not x or redis.call('LLEN', P .. 'w:' .. x) == 0 then return nil end
  local exp = redis.call('ZSCORE', HO, x .. ' x')
  if not exp then return nil end
  return math.max(tonumber(exp) - now() + 1, 1)
end

-- How long a waiter may sleep before looking again: ms (until what blocks
-- it may lapse), or less when the holder's uncollected hand-over lapses first.
local function look_ms(ms)
  local u = uncollected_ms()
  if u and u < ms then return u end
  return ms
end

-- new: the owner id cannot be queued yet (its first try), so skip the look.
local function enqueue(owner, kind, ttl, permits, holder, wl, new)
  if new or redis.call('HEXISTS', QI, owner) == 0 then redis.call('RPUSH', Q, owner) end
  redis.call('HSET', QI, owner, (now() + wl) .. ' ' .. kind .. ' ' .. ttl .. ' ' .. permits .. ' ' .. holder)
end

-- One call: main(KEYS, ARGV), ARGV[1] the operation. The operations are
-- branches here, not functions in a table: run as a script the whole file
-- is executed per call, and every function it defines is built anew.
local function main(KEYS, ARGV)
  local keyed = KEYS[2] ~= nil
  if keyed then
    -- The key= layout: the lock is KEYS[1] alone; beside it its counter,
    -- its waiters and their wake-up channel (P nil: derive again after).
    LOCK, TOKEN, NFW, SIG, P = KEYS[1], KEYS[2], KEYS[3], KEYS[4], nil
  elseif KEYS[1] ~= LOCK or not P then -- a library keeps these between calls
    LOCK = KEYS[1]
    P = string.sub(LOCK, 1, #LOCK - 4)
    TOKEN, Q, QI = P .. 'token', P .. 'q', P .. 'qi'
    RD, SEM, NFW, SIG, SN = P .. 'rd', P .. 'sem', P .. 'nfw', P .. 'sig', P .. 'sn'
    HO = P .. 'ho'
  end
  now_ms, purged = nil, nil
  local op = ARGV[1]
  if keyed ~= (string.sub(op, 1, 1) == 'k') then
    return redis.error_reply('dlock: operation ' .. tostring(op) .. ' of the other layout')
  end

  -- acq OWNER KIND TTL PERMITS FAIR HOLDER WAITLEASE [AGAIN]
  -- -> {1, token} granted; {0, ms} not granted (registered as a waiter when
  -- WAITLEASE > 0; ms: how long the current holder may still hold it);
  -- {-1, permits}: a semaphore of other permits is in force (refused).
  -- AGAIN = 1 on a waiter's later tries (the first try of an owner id cannot
  -- have registered before).
  if op == 'acq' then
    local owner, kind, ttl, permits = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
    local fair, holder, wl = ARGV[6] == '1', ARGV[7], tonumber(ARGV[8])
    local again = ARGV[9] == '1' -- a waiter's retry (may be registered)
    local other = kind == 's' and sem_other(permits)
    if other then return {-1, other} end
    take_back()
    local no_writer = false
    if fair and kind ~= 's' then
      -- While a live writer holds the lock, nobody can be granted it: join
      -- the queue at once (the common case under contention).
      local pttl = redis.call('PTTL', LOCK)
      if pttl ~= -2 then
        local t = alien()
        if t then return alien_reply(t) end
      end
      if pttl > 0 then
        if wl > 0 then enqueue(owner, kind, ttl, permits, holder, wl, not again) end
        return {0, look_ms(pttl)}
      end
      no_writer = pttl == -2
    end
    local queued = fair and redis.call('LLEN', Q) or 0
    if queued > 0 then
      advance() -- hands over a lock whose holder vanished
      queued = redis.call('LLEN', Q)
      no_writer = false
    end
    if queued == 0 and free_for(kind, permits, no_writer) then
      if again and not fair then redis.call('ZREM', NFW, owner) end
      return {1, grant(owner, kind, ttl, holder, permits)}
    end
    if not fair or kind == 's' then
      local t = alien()
      if t then return alien_reply(t) end
    end
    if wl > 0 then
      if fair then enqueue(owner, kind, ttl, permits, holder, wl, not again)
      else redis.call('ZADD', NFW, now() + wl, owner) end
    end
    return {0, look_ms(blocker_ms(kind))}

  -- wait OWNER KIND TTL PERMITS FAIR HOLDER WAITLEASE: a queued waiter's
  -- periodic look: collect a hand-over (first: one come late is still ours
  -- while not taken back), keep its place, take back what others did not
  -- collect, hand over a lock whose holder vanished.
  elseif op == 'wait' then
    local owner, kind, ttl, permits = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
    local holder, wl = ARGV[7], tonumber(ARGV[8])
    local w = P .. 'w:' .. owner
    local handed = redis.call('LPOP', w)
    if handed then return {1, tonumber(handed)} end
    local other = kind == 's' and sem_other(permits)
    if other then return {-1, other} end
    enqueue(owner, kind, ttl, permits, holder, wl)
    take_back()
    advance()
    handed = redis.call('LPOP', w)
    if handed then return {1, tonumber(handed)} end
    return {0, look_ms(blocker_ms(kind))}

  -- rel OWNER KIND -> 1 released, 0 not held (expired or never ours)
  elseif op == 'rel' then
    local owner, kind = ARGV[2], ARGV[3]
    if kind == 'x' then
      if xowner() ~= owner then return 0 end
      advance(true) -- passes LOCK on, or deletes it
      return 1
    end
    local ok = give_back(owner, kind)
    advance()
    return ok

  -- abort OWNER KIND: a waiter gives up; if the lock was handed to it
  -- meanwhile, it is passed on at once. -> 1 if it had been handed the lock
  elseif op == 'abort' then
    local owner, kind = ARGV[2], ARGV[3]
    redis.call('LREM', Q, 0, owner)
    redis.call('HDEL', QI, owner)
    redis.call('ZREM', NFW, owner)
    redis.call('DEL', P .. 'w:' .. owner)
    local had = give_back(owner, kind)
    advance()
    return had

  -- renew OWNER KIND TTL -> 1 extended, 0 no longer ours (never re-created)
  elseif op == 'renew' then
    local owner, kind, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
    if not holds(owner, kind) then
      if kind ~= 'x' then redis.call('ZREM', kind == 'r' and RD or SEM, owner) end
      return 0
    end
    if kind == 'x' then redis.call('PEXPIRE', LOCK, ttl)
    else redis.call('ZADD', kind == 'r' and RD or SEM, 'XX', now() + ttl, owner) end
    return 1

  -- setval OWNER VALUE -> 1, or 0 when not the exclusive holder
  elseif op == 'setval' then
    local h = xlock()
    if not h or h.owner ~= ARGV[2] then return 0 end
    redis.call('SET', LOCK, xstring(h.owner, h.token, h.since, h.holder, ARGV[3]), 'KEEPTTL')
    return 1

  -- info -> {owner, holder, since, token, pttl, last token, queued, readers, permits, nonfair, now, value}
  elseif op == 'info' then
    local t = alien()
    if t then return alien_reply(t) end
    local h = xlock() or {owner = '', holder = '', since = 0, token = 0, value = ''}
    return {h.owner, h.holder, h.since, h.token,
            redis.call('PTTL', LOCK), tonumber(redis.call('GET', TOKEN) or 0),
            redis.call('LLEN', Q), count(RD), count(SEM), count(NFW), now(), h.value}

  -- brk: an operator's forced release of every holder; the next waiter gets
  -- the lock. -> {holders broken, holder, token of the exclusive holder}
  elseif op == 'brk' then
    local t = alien()
    if t then return alien_reply(t) end
    local h = xlock()
    local broken = (h and 1 or 0) + count(RD) + count(SEM)
    redis.call('DEL', LOCK, RD, SEM, SN)
    advance()
    return {broken, h and h.holder or '', h and h.token or 0}

  -- A claim's record (records.c), KEYS[1] its key, a hash {v = bytes, ver =
  -- version}, in either layout (one key: no lock key is touched):
  -- recput VER NEWVER TTL BYTES -> 1 written, 0 its version is not VER
  -- ('0': none). One step, so that a runner whose lease ran out between its
  -- check and its write cannot write over the next attempt's record.
  elseif op == 'recput' then
    if (redis.call('HGET', LOCK, 'ver') or '0') ~= ARGV[2] then return 0 end
    redis.call('HSET', LOCK, 'v', ARGV[5], 'ver', ARGV[3])
    redis.call('PEXPIRE', LOCK, tonumber(ARGV[4]))
    return 1

  -- Redlock, on each of N independent masters (exclusive locks only):
  -- racq OWNER TTL HOLDER -> {1, node's token} or {0, pttl}
  elseif op == 'racq' then
    local owner, ttl, holder = ARGV[2], tonumber(ARGV[3]), ARGV[4]
    local cur = xowner()
    if cur and cur ~= owner then return {0, redis.call('PTTL', LOCK)} end
    local tok = redis.call('INCR', TOKEN)
    redis.call('SET', LOCK, xstring(owner, tok, now(), holder, ''), 'PX', ttl)
    return {1, tok}

  -- rtok OWNER TOKEN: store the quorum's token where we still hold the lock
  -- -> 1 stored, 0 not ours here
  elseif op == 'rtok' then
    local h = xlock()
    if not h or h.owner ~= ARGV[2] then return 0 end
    local tok = tonumber(ARGV[3])
    if tonumber(redis.call('GET', TOKEN) or 0) < tok then redis.call('SET', TOKEN, tok) end
    redis.call('SET', LOCK, xstring(h.owner, tok, h.since, h.holder, h.value), 'KEEPTTL')
    return 1

  -- The key= layout (KEYS: lock, counter, waiters, wake-up channel): the lock
  -- is a string set with NX PX, as redis-py's Lock, node-redlock, redsync
  -- and tooz set it, owned by whoever's value it holds; peers compare the
  -- value with their own and never read ours (dlock's holder string, as
  -- above, is as opaque and unique to them as their random tokens). Peers
  -- publish nothing on release, so dlock waiters also poll; a dlock release
  -- wakes one dlock waiter at once.

  -- kacq OWNER TTL HOLDER WAITLEASE [AGAIN] -> {1, token} or {0, pttl of
  -- the holder (-1: a peer's lock without expiry)}
  elseif op == 'kacq' then
    local owner, ttl, holder, wl = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
    local s, t = kget()
    if t then return alien_reply(t) end
    if s then
      if wl > 0 then redis.call('ZADD', NFW, now() + wl, owner) end
      return {0, redis.call('PTTL', LOCK)}
    end
    if ARGV[6] == '1' then redis.call('ZREM', NFW, owner) end
    local tok = redis.call('INCR', TOKEN)
    redis.call('SET', LOCK, xstring(owner, tok, now(), holder, ''), 'PX', ttl)
    return {1, tok}

  -- krel OWNER / kabort OWNER (also leaves the waiters) -> 1 if it was ours
  elseif op == 'krel' or op == 'kabort' then
    if op == 'kabort' then redis.call('ZREM', NFW, ARGV[2]) end
    local s = kget()
    if not s or string.match(s, '^%S+') ~= ARGV[2] then return 0 end
    redis.call('DEL', LOCK)
    kwake()
    return 1

  -- krenew OWNER TTL -> 1 extended, 0 no longer ours (never re-created)
  elseif op == 'krenew' then
    local s = kget()
    if not s or string.match(s, '^%S+') ~= ARGV[2] then return 0 end
    redis.call('PEXPIRE', LOCK, tonumber(ARGV[3]))
    return 1

  -- kinfo -> as info; owner '*' for a peer's holder, described in holder
  elseif op == 'kinfo' then
    local s, t = kget()
    if t then return alien_reply(t) end
    local h = s and parse(s)
    if s and not h then h = {owner = '*', holder = peer(s), since = 0, token = 0, value = ''} end
    h = h or {owner = '', holder = '', since = 0, token = 0, value = ''}
    return {h.owner, h.holder, h.since, h.token,
            redis.call('PTTL', LOCK), tonumber(redis.call('GET', TOKEN) or 0),
            0, 0, 0, count(NFW), now(), h.value}

  -- kbrk: delete the key whoever holds it -> as brk
  elseif op == 'kbrk' then
    local s, t = kget()
    if t then return alien_reply(t) end
    if not s then return {0, '', 0} end
    redis.call('DEL', LOCK)
    kwake()
    local h = parse(s)
    if h then return {1, h.holder, h.token} end
    return {1, peer(s), 0}
  end
  return redis.error_reply('dlock: unknown operation ' .. tostring(op))
end
