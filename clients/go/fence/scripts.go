package fence

// The resource-side halves, copies of the files in the Baton repository's
// fence/ folder (a test there keeps them equal, byte for byte).

// PostgresSQL is fence/postgres/baton_fence.sql.
const PostgresSQL = `-- Baton's fence for PostgreSQL: load once into the database the lock
-- guards (psql -f baton_fence.sql), then make
--
--     SELECT baton_fence('jobs/nightly', 1099511627777);
--
-- the first statement of every transaction that writes under the lock,
-- with the lock's name and the fencing token of its grant. It raises an
-- error whose message starts with "stale fencing token" when a higher
-- token has been seen for the name, which aborts the transaction; else it
-- records the token and keeps the mark's row locked until the transaction
-- ends, so a stale writer that races a newer one waits for it and then
-- fails. Tokens are numeric(20,0): they pass bigint's 2^63-1.
--
-- Safe to run again: it changes no mark that exists.

CREATE TABLE IF NOT EXISTS baton_fence_marks (
    name  text PRIMARY KEY,
    token numeric(20,0) NOT NULL
        CHECK (token >= 1 AND token <= 18446744073709551615)
);

CREATE OR REPLACE FUNCTION baton_fence(name text, token numeric)
RETURNS numeric
LANGUAGE plpgsql
AS $$
DECLARE
    seen numeric(20,0);
BEGIN
    IF baton_fence.name IS NULL OR baton_fence.token IS NULL THEN
        RAISE EXCEPTION 'baton_fence: name and token must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF baton_fence.token <> trunc(baton_fence.token)
       OR baton_fence.token < 1 OR baton_fence.token > 18446744073709551615 THEN
        RAISE EXCEPTION 'baton_fence: token % is not a fencing token (an integer from 1 to 2^64-1)', baton_fence.token
            USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    -- The row lock taken here is held to the end of the transaction.
    SELECT m.token INTO seen FROM baton_fence_marks m
     WHERE m.name = baton_fence.name FOR UPDATE;
    IF NOT FOUND THEN
        -- A first writer of the name: a racing one inserts too; the loser
        -- waits for the winner's commit and then locks its row.
        INSERT INTO baton_fence_marks AS m (name, token)
        VALUES (baton_fence.name, baton_fence.token)
        ON CONFLICT ON CONSTRAINT baton_fence_marks_pkey DO NOTHING;
        SELECT m.token INTO seen FROM baton_fence_marks m
         WHERE m.name = baton_fence.name FOR UPDATE;
    END IF;
    IF seen > baton_fence.token THEN
        RAISE EXCEPTION 'stale fencing token % for lock "%": token % was seen', baton_fence.token, baton_fence.name, seen
            USING ERRCODE = 'raise_exception',
                  HINT = 'a later holder of the lock has written; this holder lost the lock and must stop';
    END IF;
    IF seen < baton_fence.token THEN
        UPDATE baton_fence_marks m SET token = baton_fence.token
         WHERE m.name = baton_fence.name;
    END IF;
    RETURN baton_fence.token;
END
$$;
`

// RedisFenceLua is fence/redis/fence.lua.
const RedisFenceLua = `-- Baton's fence for Redis: checks and records the fencing token of a lock.
--   EVAL <this script> 1 <mark key> <token>
-- KEYS[1] is the mark's key (one per lock name, such as baton:fence:jobs);
-- ARGV[1] the token in decimal. Answers 1 when the token is recorded (it
-- is at least every token seen), and an error reply starting with STALE
-- when a higher token has been seen. Tokens are compared as 20-digit
-- zero-padded strings, byte by byte: never as Lua numbers, which are
-- doubles and take two tokens past 2^53 that differ by one for equal.
local MAX = '18446744073709551615'
-- above reports whether a > b, both strings of 20 digits.
local function above(a, b)
  for i = 1, 20 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end
-- padded is a token as 20 digits, or nil if it is not one.
local function padded(t)
  if type(t) ~= 'string' or #t == 0 or #t > 20 or string.find(t, '%D') then
    return nil
  end
  local p = string.rep('0', 20 - #t) .. t
  if p == '00000000000000000000' or above(p, MAX) then
    return nil
  end
  return p
end
local function shown(p)
  return (string.gsub(p, '^0+', ''))
end
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('ERR baton fence: the script takes 1 key (the mark) and 1 argument (the token)')
end
local token = padded(ARGV[1])
if not token then
  return redis.error_reply('ERR baton fence: token ' .. tostring(ARGV[1]) .. ' is not a fencing token (a decimal integer from 1 to ' .. MAX .. ')')
end
local seen = redis.call('GET', KEYS[1])
if seen then
  if #seen ~= 20 or not padded(seen) then
    return redis.error_reply('ERR baton fence: ' .. KEYS[1] .. ' holds ' .. seen .. ', not a mark of 20 digits')
  end
  if above(seen, token) then
    return redis.error_reply('STALE fencing token ' .. shown(token) .. ' for ' .. KEYS[1] .. ': token ' .. shown(seen) .. ' was seen')
  end
end
if seen ~= token then
  redis.call('SET', KEYS[1], token)
end
return 1
`

// RedisFencedSetLua is fence/redis/fenced_set.lua.
const RedisFencedSetLua = `-- Baton's fenced write for Redis: fence.lua's check and record of the
-- token, then a SET of the data key, in one step.
--   EVAL <this script> 2 <mark key> <data key> <token> <value>
-- KEYS[1] is the mark's key, KEYS[2] the key written (in Redis Cluster
-- both need one hash slot: give them a hash tag, {jobs}:mark and
-- {jobs}:data); ARGV[1] the token in decimal, ARGV[2] the value. Answers
-- 1 when the value is written, and an error reply starting with STALE,
-- writing nothing, when a higher token has been seen. Tokens are
-- compared as 20-digit zero-padded strings, byte by byte: never as Lua
-- numbers, which are doubles and take two tokens past 2^53 that differ by
-- one for equal.
local MAX = '18446744073709551615'
-- above reports whether a > b, both strings of 20 digits.
local function above(a, b)
  for i = 1, 20 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x > y
    end
  end
  return false
end
-- padded is a token as 20 digits, or nil if it is not one.
local function padded(t)
  if type(t) ~= 'string' or #t == 0 or #t > 20 or string.find(t, '%D') then
    return nil
  end
  local p = string.rep('0', 20 - #t) .. t
  if p == '00000000000000000000' or above(p, MAX) then
    return nil
  end
  return p
end
local function shown(p)
  return (string.gsub(p, '^0+', ''))
end
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('ERR baton fence: the script takes 2 keys (the mark, the data) and 2 arguments (the token, the value)')
end
local token = padded(ARGV[1])
if not token then
  return redis.error_reply('ERR baton fence: token ' .. tostring(ARGV[1]) .. ' is not a fencing token (a decimal integer from 1 to ' .. MAX .. ')')
end
local seen = redis.call('GET', KEYS[1])
if seen then
  if #seen ~= 20 or not padded(seen) then
    return redis.error_reply('ERR baton fence: ' .. KEYS[1] .. ' holds ' .. seen .. ', not a mark of 20 digits')
  end
  if above(seen, token) then
    return redis.error_reply('STALE fencing token ' .. shown(token) .. ' for ' .. KEYS[1] .. ': token ' .. shown(seen) .. ' was seen')
  end
end
if seen ~= token then
  redis.call('SET', KEYS[1], token)
end
redis.call('SET', KEYS[2], ARGV[2])
return 1
`
