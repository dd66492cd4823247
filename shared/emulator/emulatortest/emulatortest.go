// Package emulatortest starts the local emulators once per test package.
//
//	var env *emulator.Env
//
//	func TestMain(m *testing.M) {
//		emulatortest.Main(m, func(e *emulator.Env) error { env = e; return nil })
//	}
//
// The emulators are stopped when the tests end, on SIGINT or SIGTERM, and,
// when a test panics, they end with the test binary (see package emulator).
package emulatortest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/runledger/runledger/shared/emulator"
)

// Main starts the emulators (or adopts the endpoints the SDK settings
// configure), calls setup with them, runs the tests and exits with their
// status. It never returns.
func Main(m *testing.M, setup func(env *emulator.Env) error) {
	os.Exit(run(m, emulator.Options{}, setup))
}

// MainWith is Main with options, for example Services to start only SQS.
// A nil opts.Logger logs to stderr.
func MainWith(m *testing.M, opts emulator.Options, setup func(env *emulator.Env) error) {
	os.Exit(run(m, opts, setup))
}

func run(m *testing.M, opts emulator.Options, setup func(env *emulator.Env) error) (code int) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		opts.Logger = log
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// A signal stops whatever is running and exits at once: the tests may
	// be stuck, so waiting for m.Run to return is no option.
	var (
		mu  sync.Mutex
		env *emulator.Env
	)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		sig, ok := <-sigs
		if !ok {
			return
		}
		cancel()
		mu.Lock()
		err := env.Stop()
		mu.Unlock()
		if err != nil {
			log.Error("stop emulators after signal", "signal", sig.String(), "err", err)
		}
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()

	e, err := emulator.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "emulatortest: %v\n", err)
		return 1
	}
	mu.Lock()
	env = e
	mu.Unlock()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "emulatortest: %v\n", err)
			code = 1
		}
	}()

	if setup != nil {
		if err := setup(e); err != nil {
			fmt.Fprintf(os.Stderr, "emulatortest: setup: %v\n", err)
			return 1
		}
	}
	return m.Run()
}

// AssertLoopbackOnly fails t unless every listening TCP socket of the
// processes pids is bound to 127.0.0.1, and each process listens on at
// least one: nothing the tests or the local stack start may be reachable
// from the network. Where emulator.Listeners cannot list sockets (off
// Linux) it only logs that nothing was checked.
func AssertLoopbackOnly(t testing.TB, pids ...int) {
	t.Helper()
	loopback := netip.MustParseAddr("127.0.0.1")
	for _, pid := range pids {
		addrs, err := emulator.Listeners(pid)
		if errors.Is(err, emulator.ErrListenersUnsupported) {
			t.Logf("listening sockets not checked on %s: %v", runtime.GOOS, err)
			return
		}
		if err != nil {
			t.Errorf("listening sockets of pid %d: %v", pid, err)
			continue
		}
		if len(addrs) == 0 {
			t.Errorf("pid %d (%s) has no listening socket: nothing was checked", pid, command(pid))
		}
		for _, a := range addrs {
			if a.Addr() != loopback {
				t.Errorf("pid %d (%s) listens on %s, want 127.0.0.1 only", pid, command(pid), a)
			}
		}
	}
}

// command is a process's command line, for messages.
func command(pid int) string {
	b, err := exec.Command("ps", "-ww", "-o", "args=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
