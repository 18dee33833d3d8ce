module github.com/rlkit/ratelimit/examples/grpc

go 1.25.0

replace (
	github.com/rlkit/ratelimit => ../../
	github.com/rlkit/ratelimit/grpclimit => ../../grpclimit
)

require (
	github.com/benbjohnson/clock v1.3.5
	github.com/rlkit/ratelimit v0.0.0-00010101000000-000000000000
	github.com/rlkit/ratelimit/grpclimit v0.0.0-00010101000000-000000000000
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.11
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)
