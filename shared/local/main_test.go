package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/queue/queuetest"
)

var env *emulator.Env

func TestMain(m *testing.M) {
	emulatortest.Main(m, func(e *emulator.Env) error { env = e; return nil })
}

// newClient returns a queue client whose SQS requests go to counters.
func newClient(counters *local.Counters) *queue.Client {
	return queue.New(env.SQSClient(counters.CountSQS))
}

// rawSQS is the SDK client, for what the queue adapter does not expose.
func rawSQS() *sqs.Client { return env.SQSClient() }

// newQueue creates a fresh, uniquely named queue for one test and deletes
// it (and its dead-letter queue) afterwards.
func newQueue(t *testing.T, spec queue.Spec) queue.Created {
	t.Helper()
	return queuetest.New(t, newClient(nil), spec)
}

// eventually polls cond until it holds or within runs out; cond describes
// what it saw, for the failure message.
func eventually(t *testing.T, within time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, saw)
		}
		<-tick.C
	}
}

// receiveWithin waits for one value from ch.
func receiveWithin[T any](t *testing.T, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("no %s within %s", what, within)
		panic("unreachable")
	}
}

// logBuffer collects JSON log lines for assertions and echoes them to the
// test's output.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	t   *testing.T
}

func newLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{t: t}
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Output().Write(p)
	return l.buf.Write(p)
}

// lines returns the log records whose msg is msg.
func (l *logBuffer) lines(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// runInBackground runs run(ctx) until the test ends (or stop is called)
// and fails the test if it returns an error; stop cancels and waits.
func runInBackground(t *testing.T, run func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("run did not return within 30s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// shape reduces a JSON document to its structure: object keys with the
// shape of their values, the shape of an array's first element, and the
// JSON type of scalars.
func shape(t *testing.T, doc []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("unmarshal %s: %v", doc, err)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			m := map[string]any{}
			for k, e := range x {
				m[k] = walk(e)
			}
			return m
		case []any:
			if len(x) == 0 {
				return []any{}
			}
			return []any{walk(x[0])}
		case nil:
			return "null"
		case string:
			return "string"
		case float64:
			return "number"
		case bool:
			return "bool"
		}
		return "?"
	}
	return walk(v)
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
