package redislimit_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// redisAddr is the address of the Redis server the examples use: REDIS_ADDR,
// or a redis-server that TestMain starts for them on a free port.
var redisAddr = "localhost:6379"

// TestMain starts a redis-server for the examples (unless REDIS_ADDR names
// one) and stops it when they are done. Then, when the tests passed, it fails
// the run if a goroutine they started outlives them (goleak).
func TestMain(m *testing.M) {
	stop, err := startRedis()
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	// A load worker (runLoad's child, see load_test.go) keeps a goroutine
	// blocked reading its stdin until the parent closes it, by design: that
	// is how it dies with the parent. It is the harness, not the library, so
	// its process is not checked.
	if code == 0 && os.Getenv("RLKIT_LOAD_SPEC") == "" {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak: errors on successful test run:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func startRedis() (stop func(), err error) {
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		redisAddr = addr
		return func() {}, nil
	}
	// The port is free when chosen, but another process may take it before
	// redis-server binds it (other tests on the machine start servers too):
	// then try another.
	for range 5 {
		if stop, err = startRedisOnce(); err == nil {
			return stop, nil
		}
	}
	return nil, err
}

// startRedisOnce starts a redis-server on a port free now and returns once
// it answers, and is the process started (not another that owns the port).
func startRedisOnce() (stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server (needed by the examples, or set REDIS_ADDR): %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop = func() { _ = cmd.Process.Kill(); <-exited }
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return nil, fmt.Errorf("redis-server on port %d exited at start (port taken?)", port)
		default:
		}
		if info, err := c.Info(context.Background(), "server").Result(); err == nil {
			if !strings.Contains(info, "process_id:"+strconv.Itoa(cmd.Process.Pid)+"\r\n") {
				stop()
				return nil, fmt.Errorf("port %d is served by another redis-server", port)
			}
			redisAddr = addr
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("redis-server on port %d does not answer", port)
		}
	}
}
