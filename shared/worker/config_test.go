package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

func TestZeroConfigTakesTheDocumentedDefaults(t *testing.T) {
	t.Parallel()
	c := worker.Config{}.WithDefaults()
	if c.Name == "" || c.Clock == nil || c.Logger != slog.Default() {
		t.Errorf("name %q, clock set %v, logger %v; want a name, a clock and slog's default", c.Name, c.Clock != nil, c.Logger)
	}
	if c.Concurrency != 1 {
		t.Errorf("concurrency %d, want 1", c.Concurrency)
	}
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"VisibilityTimeout", c.VisibilityTimeout, 30 * time.Second},
		{"PollWait", c.PollWait, queue.MaxWait},
		{"LeaseInterval", c.LeaseInterval, 10 * time.Second},
		{"ShutdownGrace", c.ShutdownGrace, 30 * time.Second},
		{"StopTimeout", c.StopTimeout, 5 * time.Second},
		{"DeadlineReserve", c.DeadlineReserve, 5 * time.Second},
		{"DefaultHeartbeatInterval", c.DefaultHeartbeatInterval, 10 * time.Second},
		{"CompleteTimeout", c.CompleteTimeout, 10 * time.Second},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
	// A negative duration is no zero: it stays, for New to refuse.
	if c := (worker.Config{ShutdownGrace: -time.Second}).WithDefaults(); c.ShutdownGrace != -time.Second {
		t.Errorf("negative shutdown grace became %s", c.ShutdownGrace)
	}
}

func TestNewNamesTheNegativeDuration(t *testing.T) {
	t.Parallel()
	cfg := worker.Config{APIURL: "http://localhost:1", EventsQueueURL: "http://q/events", Queue: &queue.Client{},
		DeadlineReserve: -time.Second}
	w, err := worker.New(cfg, func(context.Context, worker.Task) error { return nil })
	if w != nil || err == nil || !strings.Contains(err.Error(), "deadline reserve -1s is negative") {
		t.Fatalf("New = %v, %v; want no worker and an error naming the deadline reserve", w, err)
	}
}
