package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	boom := errors.New("boom")
	cases := []struct {
		name  string
		err   error
		cause *stopCause
		want  result
	}{
		{"success", nil, nil, result{outcome: OutcomeSucceeded, retryable: true, report: true}},
		{"success after cancel request wins", nil, errCancelRequested, result{outcome: OutcomeSucceeded, retryable: true, report: true}},
		{"success of a superseded attempt is not reported", nil, errAttemptOver, result{report: false}},
		{"failure of a superseded attempt is not reported", boom, errAttemptOver, result{report: false}},
		{"plain error", boom, nil, result{outcome: OutcomeFailed, category: CategoryError, retryable: true, report: true}},
		{"permanent", Permanent(boom), nil, result{outcome: OutcomeFailed, category: CategoryError, report: true}},
		{"category", WithCategory(boom, "bad_input"), nil, result{outcome: OutcomeFailed, category: "bad_input", retryable: true, report: true}},
		{"outermost category wins", WithCategory(WithCategory(boom, "inner"), "outer"), nil, result{outcome: OutcomeFailed, category: "outer", retryable: true, report: true}},
		{"cancel acknowledged", context.Canceled, errCancelRequested, result{outcome: OutcomeCancelled, category: CategoryCancelled, report: true}},
		{"cancel acknowledged, wrapped", fmt.Errorf("stopping: %w", context.Canceled), errCancelRequested, result{outcome: OutcomeCancelled, category: CategoryCancelled, report: true}},
		{"failure while cancelling is the truth", WithCategory(boom, "disk_full"), errCancelRequested, result{outcome: OutcomeFailed, category: "disk_full", retryable: true, report: true}},
		{"timeout", context.DeadlineExceeded, errRunTimeout, result{outcome: OutcomeFailed, category: CategoryTimeout, retryable: true, report: true}},
		{"uncategorised error after timeout", boom, errRunTimeout, result{outcome: OutcomeFailed, category: CategoryTimeout, retryable: true, report: true}},
		{"categorised error after timeout keeps it", WithCategory(boom, "upstream_down"), errRunTimeout, result{outcome: OutcomeFailed, category: "upstream_down", retryable: true, report: true}},
		{"shutdown", context.Canceled, errShutdown, result{outcome: OutcomeFailed, category: CategoryWorkerShutdown, retryable: true, report: true}},
		{"deadline", context.DeadlineExceeded, errLambdaDeadline, result{outcome: OutcomeFailed, category: CategoryWorkerDeadline, retryable: true, report: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify(t.Context(), tc.err, tc.cause, log)
			if got != tc.want {
				t.Errorf("classify(%v, %v) = %+v, want %+v", tc.err, tc.cause, got, tc.want)
			}
		})
	}
	code := 7
	got := classify(t.Context(), WithExitCode(Permanent(boom), code), nil, log)
	if got.exitCode == nil || *got.exitCode != 7 || got.retryable {
		t.Errorf("exit code: %+v", got)
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, Task) error { return nil }
	valid := Config{APIURL: "http://localhost:1", EventsQueueURL: "http://q/events", Queue: nopQueue{}}
	w, err := New(valid, h)
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.Concurrency != DefaultConcurrency || w.cfg.VisibilityTimeout != DefaultVisibilityTimeout || w.cfg.Name == "" {
		t.Errorf("defaults not applied: %+v", w.cfg)
	}
	for name, mutate := range map[string]func(*Config){
		"no API URL":        func(c *Config) { c.APIURL = "" },
		"relative API URL":  func(c *Config) { c.APIURL = "/v1" },
		"no events queue":   func(c *Config) { c.EventsQueueURL = "" },
		"no queue client":   func(c *Config) { c.Queue = nil },
		"@ in name":         func(c *Config) { c.Name = "a@b" },
		"negative workers":  func(c *Config) { c.Concurrency = -1 },
		"short visibility":  func(c *Config) { c.VisibilityTimeout = 500 * time.Millisecond },
		"long poll wait":    func(c *Config) { c.PollWait = time.Minute },
		"negative interval": func(c *Config) { c.LeaseInterval = -time.Second },
	} {
		c := valid
		mutate(&c)
		if _, err := New(c, h); err == nil {
			t.Errorf("%s: New accepted %+v", name, c)
		}
	}
	if _, err := New(valid, nil); err == nil {
		t.Error("New accepted a nil handler")
	}
	if err := w.Run(t.Context()); err == nil {
		t.Error("Run without a pool queue URL returned nil")
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff{min: 100 * time.Millisecond, max: 400 * time.Millisecond}
	for i, ceiling := range []time.Duration{100, 200, 400, 400} {
		ceiling *= time.Millisecond
		d := b.next()
		if d < ceiling/2 || d > ceiling {
			t.Errorf("wait %d = %s, want within [%s, %s]", i, d, ceiling/2, ceiling)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Errorf("after reset: %s", d)
	}
}

// nopQueue satisfies Queue for tests that never reach a queue.
type nopQueue struct{ Queue }
