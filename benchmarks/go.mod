module github.com/rlkit/ratelimit/benchmarks

go 1.24.0

replace github.com/rlkit/ratelimit => ../

require (
	github.com/juju/ratelimit v1.0.2
	github.com/rlkit/ratelimit v0.0.0-00010101000000-000000000000
	go.uber.org/ratelimit v0.3.1
	golang.org/x/time v0.14.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	gopkg.in/check.v1 v1.0.0-20201130134442-10cb98267c6c // indirect
)
