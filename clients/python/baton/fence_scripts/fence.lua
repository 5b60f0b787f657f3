-- Baton's fence for Redis: checks and records the fencing token of a lock.
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
