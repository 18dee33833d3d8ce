// Command envoylimit-server is an Envoy rate limit service: it serves
// envoy.service.ratelimit.v3.RateLimitService over gRPC from
// envoyproxy/ratelimit's YAML configuration, with this repository's
// algorithms as extensions (package envoylimit), keeping its counters in
// memory or in Redis.
//
//	envoylimit-server -config ./config -listen 127.0.0.1:8081 -redis 127.0.0.1:6379
//
// It reloads the configuration when its files change (-reload), keeping
// the old one when a file is bad, and every key's count across a change
// (on Redis across a restart too: each limit's last policies are kept in
// Redis beside its counters, under -redis-prefix "policies:"), and stops
// gracefully on SIGINT or SIGTERM. It prints "listening on ADDR" to stderr once it serves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/rlkit/ratelimit/redislimit"
	"google.golang.org/grpc"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "envoylimit-server:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("envoylimit-server", flag.ContinueOnError)
	configPath := fs.String("config", "", "a YAML file or a directory of them, in envoyproxy/ratelimit's format (required)")
	listen := fs.String("listen", "127.0.0.1:8081", "the gRPC listen address")
	redisAddr := fs.String("redis", "", "Redis address (host:port); empty keeps the counters in memory")
	prefix := fs.String("redis-prefix", "rls:", "the prefix of every Redis key")
	redisTimeout := fs.Duration("redis-timeout", 100*time.Millisecond, "how long a decision may wait for Redis before the failure policy answers")
	headers := fs.String("headers", "none", "the fields responses carry: none, envoy (RateLimit-Limit/-Remaining/-Reset) or ietf (RateLimit-Policy, RateLimit)")
	failure := fs.String("failure", "to-envoy", "on a Redis failure: to-envoy (a gRPC error; Envoy's failure_mode_deny decides) or as-limiter (fail open, as redislimit does by default)")
	reload := fs.Duration("reload", 2*time.Second, "how often to look for configuration changes; 0 never")
	shadow := fs.Bool("shadow", false, "global shadow mode: decide and report as if enforced, never deny")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("-config is required")
	}
	cfg, err := envoylimit.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	opts := []envoylimit.Option{}
	switch *headers {
	case "none":
	case "envoy":
		opts = append(opts, envoylimit.WithHeaders(envoylimit.EnvoyHeaders))
	case "ietf":
		opts = append(opts, envoylimit.WithHeaders(envoylimit.IETFHeaders))
	default:
		return fmt.Errorf("-headers must be none, envoy or ietf, got %q", *headers)
	}
	switch *failure {
	case "to-envoy":
	case "as-limiter":
		opts = append(opts, envoylimit.WithFailurePolicy(envoylimit.FailAsLimiter))
	default:
		return fmt.Errorf("-failure must be to-envoy or as-limiter, got %q", *failure)
	}
	if *shadow {
		opts = append(opts, envoylimit.WithShadowMode())
	}
	if *redisAddr != "" {
		client := redis.NewClient(&redis.Options{Addr: *redisAddr})
		defer client.Close()
		history := policyHistory{client: client, prefix: *prefix}
		opts = append(opts, envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
			// A limit's keys under a prefix of its own: a hash of its name,
			// which may hold characters Redis key prefixes must not ('{').
			h := fnv.New64a()
			h.Write([]byte(name))
			hashed := fmt.Sprintf("%016x", h.Sum64())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			prev, err := history.previous(ctx, hashed, p)
			if err != nil {
				return nil, err
			}
			lim, err := redislimit.New(client, p, append(prev,
				redislimit.WithPrefix(*prefix+hashed+":"), redislimit.WithName(name), redislimit.WithTimeout(*redisTimeout))...)
			if err != nil {
				return nil, err
			}
			if err := history.record(ctx, hashed, p); err != nil {
				return nil, fmt.Errorf("recording a limit's policy: %w", err)
			}
			return recordedLimiter{lim, history, hashed}, nil
		}))
	}
	svc, err := envoylimit.NewService(cfg, opts...)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, svc)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *reload > 0 {
		go svc.Watch(ctx, *reload, func(err error) {
			if err != nil {
				log.Printf("configuration not reloaded, the old one stays: %v", err)
			} else {
				log.Printf("configuration reloaded from %s", *configPath)
			}
		}, *configPath)
	}
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	fmt.Fprintf(os.Stderr, "listening on %s\n", ln.Addr())
	return srv.Serve(ln)
}
