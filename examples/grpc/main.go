// Command grpc is a small gRPC service limited by package grpclimit, per
// API key (the x-api-key metadata) in two tiers: 2 calls a minute for a
// free key, 100 for a pro one. It starts the server on a loopback port,
// calls it as two API keys, prints what a grpcurl -v user would see (the
// status, the rate-limit header metadata and, for the denied call, the
// decoded RetryInfo and QuotaFailure details), then calls it through
// grpclimit's client interceptors: once paced by a local limiter, which
// refuses a call before sending it, and once with no limiter, obeying the
// server's RetryInfo. Then it exits:
//
//	go run ./examples/grpc
//
// The service is written by hand (a grpc.ServiceDesc with one unary
// method taking and returning a google.protobuf.StringValue), so the
// example needs no protoc. The limiters and the interceptor run on a mock
// clock that the program advances itself, so the output is the same on
// every run; a real server leaves WithClock out.
//
// The example is its own module, so that the root module gets no gRPC
// dependency.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	_ "google.golang.org/genproto/googleapis/rpc/errdetails" // RetryInfo and QuotaFailure, to print them
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// The service: /demo.Greeter/Hello answers "hello, <name>".
const (
	serviceName = "demo.Greeter"
	helloMethod = "/demo.Greeter/Hello"
)

// apiKeys are the keys the server knows and their plans. A real server
// looks them up in its user store.
var apiKeys = map[string]string{
	"key-alice": "free",
	"key-bob":   "pro",
	"key-carol": "free",
	"key-dave":  "free",
}

// start is the mock clock's time when the program starts.
var start = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// newServer returns the gRPC server: an authentication interceptor that
// refuses unknown API keys, then grpclimit's interceptor charging each call
// to its API key in the key's tier.
func newServer(clk ratelimit.Clock, g *greeter) (*grpc.Server, error) {
	free, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Minute), 2),
		ratelimit.WithClock(clk), ratelimit.WithMaxKeys(100_000))
	if err != nil {
		return nil, err
	}
	pro, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Minute), 100),
		ratelimit.WithClock(clk), ratelimit.WithMaxKeys(100_000))
	if err != nil {
		return nil, err
	}
	tiers, err := ratelimit.NewTiered(func(_ context.Context, key string) string { return apiKeys[key] },
		map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	if err != nil {
		return nil, err
	}
	limits, err := grpclimit.New([]grpclimit.Limit{
		{Name: "per-key", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: tiers},
	}, grpclimit.WithClock(clk))
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(authenticate, limits.Unary()),
		grpc.ChainStreamInterceptor(limits.Stream()),
	)
	srv.RegisterService(&greeterDesc, g)
	return srv, nil
}

// authenticate refuses calls without a known API key, before they reach
// the limiter: KeyByMetadata("x-api-key") does not apply to a call without one, which
// the limit would then let through uncharged.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if keys := md.Get("x-api-key"); len(keys) == 0 || apiKeys[keys[0]] == "" {
		return nil, status.Error(codes.Unauthenticated, "unknown API key")
	}
	return handler(ctx, req)
}

// greeter implements the service. It counts the calls it serves per API
// key, so that the demo can show which calls never reached it.
type greeter struct {
	mu     sync.Mutex
	served map[string]int
}

func (g *greeter) hello(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	g.mu.Lock()
	g.served[md.Get("x-api-key")[0]]++
	g.mu.Unlock()
	return wrapperspb.String("hello, " + in.GetValue()), nil
}

func (g *greeter) servedFor(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.served[key]
}

// greeterDesc describes the service to grpc.Server, as protoc-gen-go-grpc
// would generate it.
var greeterDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(*greeter).hello(ctx, req.(*wrapperspb.StringValue))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: helloMethod}, h)
		},
	}},
}

// run starts the server on 127.0.0.1:0, makes the demo's calls through a
// client connection to it, writes what they show to out, and stops the
// server.
func run(ctx context.Context, out io.Writer) error {
	clk := clock.NewMock()
	clk.Set(start)
	g := &greeter{served: map[string]int{}}
	srv, err := newServer(clk, g)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Print(err)
		}
	}()

	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()

	fmt.Fprintf(out, "%s on a loopback port: %s, 2 calls a minute for a free API key, 100 for a pro one.\n",
		serviceName, strings.TrimPrefix(helloMethod, "/"))
	calls := []struct {
		key, name string
		advance   time.Duration // of the mock clock, before the call
	}{
		{"key-alice", "alice", 0},
		{"key-alice", "alice", 0},
		{"key-alice", "alice", 0}, // the free tier's third call in a minute: denied
		{"key-bob", "bob", 0},     // another key, another bucket
		{"key-alice", "alice", 30 * time.Second},
	}
	for i, c := range calls {
		if c.advance > 0 {
			clk.Add(c.advance)
			fmt.Fprintf(out, "\n(%v later)\n", c.advance)
		}
		fmt.Fprintf(out, "\n== call %d: %s as %s (%s)\n", i+1, strings.TrimPrefix(helloMethod, "/"), c.key, apiKeys[c.key])
		if err := call(ctx, out, cc, c.key, c.name); err != nil {
			return err
		}
	}
	return clientDemo(ctx, out, clk, g, ln.Addr().String())
}

// clientDemo calls the server through grpclimit's client interceptors, on
// the same mock clock, printing one line per call.
func clientDemo(ctx context.Context, out io.Writer, clk *clock.Mock, g *greeter, addr string) error {
	// 1. Paced by a local limiter that matches the free plan: the client
	// refuses a call it would have to wait for longer than the call's
	// deadline, at once and without sending it.
	local, err := ratelimit.NewTokenBucket(ratelimit.Per(2, time.Minute), 2, ratelimit.WithClock(clk))
	if err != nil {
		return err
	}
	paced, err := grpclimit.NewClient(local, grpclimit.WithClock(clk))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\n== key-carol (free) through grpclimit.NewClient with a local limiter of 2 calls a minute; 5 s deadlines")
	if err := clientCalls(ctx, out, addr, paced, "key-carol", 1, 3); err != nil {
		return err
	}
	fmt.Fprintf(out, "the server served %d of key-carol's calls\n", g.servedFor("key-carol"))

	// 2. No local limiter: the client learns from the server's metadata
	// (and would from a RetryInfo): when an answer says the quota is spent,
	// it holds back every call to the server until the announced reset.
	// For a token bucket the server announces when the bucket is full
	// again, so the client waits the whole minute: never faster than the
	// server allows, sometimes slower.
	obey, err := grpclimit.NewClient(nil, grpclimit.WithClock(clk),
		grpclimit.WithPauseHook(func(_ context.Context, method string, d time.Duration) {
			fmt.Fprintf(out, "  (pause hook: the server asks to hold calls back for %v after %s)\n", d, method)
		}))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\n== key-dave (free) through grpclimit.NewClient(nil), which paces by the server's metadata and RetryInfo; 5 s deadlines")
	if err := clientCalls(ctx, out, addr, obey, "key-dave", 1, 4); err != nil {
		return err
	}
	clk.Add(time.Minute)
	fmt.Fprintln(out, "(1m0s later)")
	if err := clientCalls(ctx, out, addr, obey, "key-dave", 5, 5); err != nil {
		return err
	}
	fmt.Fprintf(out, "the server served %d of key-dave's calls\n", g.servedFor("key-dave"))
	return nil
}

// clientCalls makes Hello calls number from to to as key through a
// connection using c's interceptors, each with a 5 s deadline, and prints
// one line per call.
func clientCalls(ctx context.Context, out io.Writer, addr string, c *grpclimit.Client, key string, from, to int) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.Unary()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	for i := from; i <= to; i++ {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var header metadata.MD
		err := cc.Invoke(callCtx, helloMethod, wrapperspb.String(key), new(wrapperspb.StringValue), grpc.Header(&header))
		cancel()
		fmt.Fprintf(out, "call %d: ", i)
		switch {
		case err == nil:
			fmt.Fprintf(out, "OK, x-ratelimit-remaining: %s\n", strings.Join(header.Get("x-ratelimit-remaining"), ","))
		case errors.Is(err, ratelimit.ErrDeadline):
			fmt.Fprintf(out, "%v, not sent: the local limiter's wait outlasts the deadline\n", status.Code(err))
		case errors.Is(err, grpclimit.ErrPauseDeadline):
			fmt.Fprintf(out, "%v, not sent: the server's pause outlasts the deadline\n", status.Code(err))
		default:
			fmt.Fprintf(out, "%v: %s\n", status.Code(err), status.Convert(err).Message())
		}
	}
	return nil
}

// call makes one Hello call with the API key and prints, as grpcurl -v
// does, the response header metadata, the response or the error with its
// details. It returns an error only when the output cannot be made.
func call(ctx context.Context, out io.Writer, cc *grpc.ClientConn, key, name string) error {
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	var header metadata.MD
	resp := new(wrapperspb.StringValue)
	callErr := cc.Invoke(ctx, helloMethod, wrapperspb.String(name), resp, grpc.Header(&header))

	fmt.Fprintln(out, "Response headers received:")
	printMetadata(out, header)
	if callErr == nil {
		fmt.Fprintln(out, "\nResponse contents:")
		return printJSON(out, resp, "")
	}
	st, ok := status.FromError(callErr)
	if !ok {
		return callErr
	}
	fmt.Fprintln(out, "\nERROR:")
	fmt.Fprintf(out, "  Code: %v\n  Message: %s\n", st.Code(), st.Message())
	if details := st.Proto().GetDetails(); len(details) > 0 {
		fmt.Fprintln(out, "  Details:")
		for i, d := range details {
			fmt.Fprintf(out, "  %d)\t", i+1)
			if err := printJSON(out, d, "    "); err != nil {
				return err
			}
		}
	}
	return nil
}

// printMetadata prints the rate-limit fields of md sorted by name, one
// "name: value" line each (gRPC's own headers, such as content-type, are
// left out).
func printMetadata(out io.Writer, md metadata.MD) {
	var names []string
	for name := range md {
		if strings.HasPrefix(name, "ratelimit") || strings.HasPrefix(name, "x-ratelimit-") || name == "retry-after" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range md[name] {
			fmt.Fprintf(out, "%s: %s\n", name, v)
		}
	}
}

// printJSON prints m as grpcurl does: its protobuf JSON form, indented by
// two spaces, each line after the first prefixed. Details (google.protobuf.Any)
// print with their "@type". protojson's spacing varies on purpose, so the
// output is compacted and indented again to stay the same on every run.
func printJSON(out io.Writer, m proto.Message, prefix string) error {
	b, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return err
	}
	if err := json.Indent(&indented, compact.Bytes(), prefix, "  "); err != nil {
		return err
	}
	fmt.Fprintln(out, indented.String())
	return nil
}
