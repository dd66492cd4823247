package app

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

type sinkDouble struct {
	mu   sync.Mutex
	sigs []protocol.Signal
}

func (s *sinkDouble) Publish(sig protocol.Signal) {
	s.mu.Lock()
	s.sigs = append(s.sigs, sig)
	s.mu.Unlock()
}

// Every Part's event sink gets each event; Flush reaches every Part that
// has one after each HTTP request, and is bounded in time.
func TestEventsReachEveryPartAndAreFlushed(t *testing.T) {
	t.Parallel()
	a, b := &sinkDouble{}, &sinkDouble{}
	var flushes int
	var deadline time.Time
	parts := []Part{
		{Name: "a", Events: a},
		{Name: "quiet"},
		{Name: "b", Events: b, Flush: func(ctx context.Context) error {
			flushes++
			deadline, _ = ctx.Deadline()
			return nil
		}},
	}
	cfg := Config{Parts: parts, Logger: slog.New(slog.DiscardHandler)}
	cfg.events().Publish(protocol.Signal{Type: protocol.SignalRunFailed, Run: "r1"})
	if len(a.sigs) != 1 || len(b.sigs) != 1 {
		t.Fatalf("sinks got %d and %d events, want 1 each", len(a.sigs), len(b.sigs))
	}
	if (&Config{Parts: []Part{{Name: "quiet"}}}).events() != nil {
		t.Error("without sinks the scheduler still gets one")
	}
	app := &App{Config: cfg}
	h := app.flushing(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/runs", nil))
	if rec.Code != http.StatusNoContent || flushes != 1 {
		t.Fatalf("status %d, %d flushes; want the answer and one flush", rec.Code, flushes)
	}
	if deadline.IsZero() || deadline.Sub(start) > FlushTimeout+time.Second {
		t.Errorf("flush deadline %s after the request, want at most %s", deadline.Sub(start), FlushTimeout)
	}
}
