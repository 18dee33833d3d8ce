-- nochain.lua: in the scripts of a limiter without previous policies,
-- there is never state to inherit: inherit is nil, and the scripts call
-- it as "inherit and inherit(...)", which makes no closure for its charge
-- argument either.
local inherit
