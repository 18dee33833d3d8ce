module github.com/rlkit/ratelimit/redislimit

go 1.24

replace github.com/rlkit/ratelimit => ../

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/redis/go-redis/v9 v9.22.0
	github.com/rlkit/ratelimit v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.30.0 // indirect
)
