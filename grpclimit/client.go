package grpclimit

// Client holds the client interceptors; built by the client helper.
type Client struct{}
