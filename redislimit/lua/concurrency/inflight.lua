-- Count the permits held now.
--
-- KEYS[1] the client's permits (concurrency/helpers.lua)
-- ARGV    "" (the server's time)
-- returns the permits held
--@uses concurrency/helpers
return live(KEYS[1])
