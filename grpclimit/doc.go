// Package grpclimit limits gRPC traffic with the limiters of package
// ratelimit: unary and stream server interceptors that take the same
// limits as httplimit's middleware, and client interceptors that wait for
// a local limiter and obey the server's RetryInfo.
package grpclimit
