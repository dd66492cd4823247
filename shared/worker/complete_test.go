package worker_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/worker"
)

// routeFault is a transport that fails the complete route's requests, as
// an API the worker cannot reach would; the other routes go through.
type routeFault struct {
	// hang waits for the request's deadline instead of failing at once.
	hang bool
}

func (r routeFault) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Path, "/complete") {
		return http.DefaultTransport.RoundTrip(req)
	}
	if r.hang {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return nil, errors.New("connection refused by the test")
}

// routeConfig is the fixture's worker config with the SDK's default:
// completions through the API's complete route first.
func (f *fixture) routeConfig(name string) worker.Config {
	cfg := f.config(name)
	cfg.QueueCompletions = false
	return cfg
}

// ok succeeds with an output ref.
func ok(ctx context.Context, task worker.Task) error {
	return task.SetOutputRef("s3://bucket/" + task.Run)
}

// A reachable complete route takes the completion: it is applied by the
// API, nothing goes to the events queue, and the message goes after.
func TestCompletesThroughTheRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	w := f.newWorker(f.routeConfig("route"), ok)
	env := f.dispatch(nil)
	f.start(w)

	waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) >= 1 })
	calls := f.peer.callsOf("complete", env.Ref())
	if len(calls) != 1 || calls[0].Status != http.StatusOK || calls[0].Outcome != string(worker.OutcomeSucceeded) {
		t.Fatalf("complete calls = %+v, want one succeeded completion answered 200", calls)
	}
	if calls[0].Auth != "Bearer "+env.Token {
		t.Errorf("complete authorization = %q, want the attempt's token as bearer", calls[0].Auth)
	}
	if sends := f.q.completionSends(f.events); len(sends) != 0 {
		t.Errorf("%d completions sent to the events queue, want none: the route took it", len(sends))
	}
	if cnt := f.poolCounts(); cnt.Total() != 0 {
		t.Errorf("pool queue holds %+v, want nothing", cnt)
	}
}

// When the route is unreachable (no connection, no answer in time, 429,
// a 5xx) the completion goes to the events queue, with the event id the
// route was offered, and only then does the message go.
func TestCompletionFallsBackToTheQueueWhenTheRouteIsUnreachable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int // the peer's answer, or 0 for a transport fault
		fault  routeFault
	}{
		{name: "503", status: http.StatusServiceUnavailable},
		{name: "429", status: http.StatusTooManyRequests},
		{name: "connection refused"},
		{name: "timeout", fault: routeFault{hang: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			cfg := f.routeConfig("fallback")
			if tc.status == 0 {
				cfg.HTTPClient = &http.Client{Transport: tc.fault, Timeout: 30 * time.Second}
				cfg.CompleteTimeout = 200 * time.Millisecond
			}
			w := f.newWorker(cfg, ok)
			env := f.dispatch(nil)
			if tc.status != 0 {
				f.peer.failCompletes(env.Ref(), tc.status, "unavailable")
			}
			f.start(w)

			c := f.completion(env.Ref())
			waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) >= 1 })
			if c.Outcome != worker.OutcomeSucceeded || c.Token != env.Token || c.OutputRef != "s3://bucket/"+env.Run {
				t.Errorf("queued completion = %+v, want the succeeded attempt with its token and output", c)
			}
			if tc.status != 0 {
				calls := f.peer.callsOf("complete", env.Ref())
				if len(calls) != 1 || calls[0].EventID != c.EventID {
					t.Errorf("complete calls = %+v, want one try with the queued completion's event id %s", calls, c.EventID)
				}
			}
			if sends := f.q.completionSends(f.events); len(sends) != 1 {
				t.Errorf("%d completion sends to the events queue, want 1", len(sends))
			}
		})
	}
}

// A 4xx answer of the route is the server's decision: nothing goes to the
// events queue, and the message goes.
func TestCompletionRefusedByTheRouteIsFinal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		code   string
	}{
		{http.StatusConflict, "stale_attempt"},
		{http.StatusConflict, "illegal_transition"},
		{http.StatusUnauthorized, "invalid_token"},
	}
	for _, tc := range cases {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			w := f.newWorker(f.routeConfig("refused"), ok)
			env := f.dispatch(nil)
			f.peer.failCompletes(env.Ref(), tc.status, tc.code)
			f.start(w)

			waitFor(t, "the message to be deleted", func() bool { return f.q.count("delete", f.pool) >= 1 })
			if calls := f.peer.callsOf("complete", env.Ref()); len(calls) != 1 || calls[0].Code != tc.code {
				t.Errorf("complete calls = %+v, want one refused with %s", calls, tc.code)
			}
			if sends := f.q.completionSends(f.events); len(sends) != 0 {
				t.Errorf("%d completions sent to the events queue after a %d %s, want none", len(sends), tc.status, tc.code)
			}
		})
	}
}
