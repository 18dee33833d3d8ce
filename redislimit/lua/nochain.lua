-- nochain.lua: in the scripts of a limiter without previous policies,
-- there is never state to inherit: inherit is nil, and the scripts call
-- it as "inherit and inherit(...)" (or under "if inherit"), which makes no
-- closure for its charge argument either. The names that only the scripts
-- with previous policies define (chain.lua, store.lua and each
-- <algorithm>/charge.lua) and that a decision or refund script names on
-- those paths are declared here, nil, so that no script reads a global.
local inherit, writes
local tbCharged, lbCharged, fwCharged, slCharged, scCharged, qCharged
