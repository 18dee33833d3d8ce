module github.com/rlkit/ratelimit/grpclimit

go 1.25.0

replace github.com/rlkit/ratelimit => ../

require github.com/rlkit/ratelimit v0.0.0-00010101000000-000000000000
