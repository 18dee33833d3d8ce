-- Reset: forget the client's state under the current policy and every
-- previous one, and its block.
--
-- KEYS     the client's keys (the same hash tag: one slot)
--@uses store
for _, key in ipairs(KEYS) do
  unlink(key)
end
return 1
