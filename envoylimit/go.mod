module github.com/rlkit/ratelimit/envoylimit

go 1.25.0

replace github.com/rlkit/ratelimit => ../

replace github.com/rlkit/ratelimit/redislimit => ../redislimit

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/envoyproxy/go-control-plane/envoy v1.39.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/rlkit/ratelimit v0.0.0-00010101000000-000000000000
	github.com/rlkit/ratelimit/redislimit v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.yaml.in/yaml/v3 v3.0.5
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cncf/xds/go v0.0.0-20260202195803-dba9d589def2 // indirect
	github.com/envoyproxy/protoc-gen-validate v1.3.3 // indirect
	github.com/planetscale/vtprotobuf v0.6.1-0.20240319094008-0393e58bdf10 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260720211330-0afa2a65878a // indirect
)
