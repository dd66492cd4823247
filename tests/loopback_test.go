package tests

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
)

// Nothing the local stack or the tests start is reachable from the network:
// every listening socket is on 127.0.0.1. The stack is started the way
// `runledger local` starts it (its own emulators, data kept on disk, the
// demo worker); the package's test emulators are checked as well.
func TestLocalStackListensOnLoopbackOnly(t *testing.T) {
	if _, err := emulator.Listeners(os.Getpid()); errors.Is(err, emulator.ErrListenersUnsupported) {
		t.Skipf("cannot list listening sockets on %s: %v", runtime.GOOS, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{
		ListenAddr: "127.0.0.1:0", DataDir: t.TempDir(), DemoWorker: true,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("start local stack: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := st.Stop(ctx); err != nil {
			t.Errorf("stop local stack: %v", err)
		}
	})
	// This process serves the API; the emulators are processes of their own.
	pids := []int{os.Getpid()}
	for _, ep := range []struct {
		started bool
		pid     int
	}{
		{st.Env.DynamoDB().Started, st.Env.DynamoDB().PID},
		{st.Env.SQS().Started, st.Env.SQS().PID},
		{env.DynamoDB().Started, env.DynamoDB().PID},
		{env.SQS().Started, env.SQS().PID},
	} {
		if ep.started {
			pids = append(pids, ep.pid)
		}
	}
	emulatortest.AssertLoopbackOnly(t, pids...)
}
