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
	mu    sync.Mutex
	notes []protocol.Notice
}

func (s *sinkDouble) Publish(n protocol.Notice) {
	s.mu.Lock()
	s.notes = append(s.notes, n)
	s.mu.Unlock()
}

// Every Part's notice sink gets each notice; Flush reaches every Part that
// has one after each HTTP request, and is bounded in time.
func TestNoticesReachEveryPartAndAreFlushed(t *testing.T) {
	t.Parallel()
	a, b := &sinkDouble{}, &sinkDouble{}
	var flushes int
	var deadline time.Time
	parts := []Part{
		{Name: "a", Notices: a},
		{Name: "quiet"},
		{Name: "b", Notices: b, Flush: func(ctx context.Context) error {
			flushes++
			deadline, _ = ctx.Deadline()
			return nil
		}},
	}
	cfg := Config{Parts: parts, Logger: slog.New(slog.DiscardHandler)}
	cfg.notices().Publish(protocol.Notice{Type: protocol.NoticeRunFailed, Run: "r1"})
	if len(a.notes) != 1 || len(b.notes) != 1 {
		t.Fatalf("sinks got %d and %d notices, want 1 each", len(a.notes), len(b.notes))
	}
	if (&Config{Parts: []Part{{Name: "quiet"}}}).notices() != nil {
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
