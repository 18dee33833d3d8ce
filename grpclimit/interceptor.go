package grpclimit

// Interceptor holds the server interceptors; built by the server helper.
type Interceptor struct{}
