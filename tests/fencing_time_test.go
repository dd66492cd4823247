package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/worker"
)

// partition is a worker's transport to the API that drops every heartbeat
// once cut is set, as a network partition between the worker and the API
// would, and notes the last lease_expires_at each attempt was granted (by a
// claim or a heartbeat that got through).
type partition struct {
	cut     atomic.Bool
	dropped atomic.Int32 // heartbeats dropped

	mu     sync.Mutex
	leases map[int]time.Time // attempt -> its last lease_expires_at
}

func (p *partition) RoundTrip(r *http.Request) (*http.Response, error) {
	renews := strings.HasSuffix(r.URL.Path, "/v1/attempts/claim") || strings.HasSuffix(r.URL.Path, "/v1/attempts/heartbeat")
	if !renews {
		return http.DefaultTransport.RoundTrip(r)
	}
	if strings.HasSuffix(r.URL.Path, "/heartbeat") && p.cut.Load() {
		p.dropped.Add(1)
		return nil, errors.New("heartbeat lost in the partition")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Attempt int `json:"attempt"`
	}
	_ = json.Unmarshal(body, &req)
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	var lease struct {
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	}
	if json.Unmarshal(answer, &lease) == nil {
		p.mu.Lock()
		p.leases[req.Attempt] = lease.LeaseExpiresAt
		p.mu.Unlock()
	}
	return resp, nil
}

func (p *partition) lease(attempt int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leases[attempt]
}

// 19. Fencing by time. A worker is cut off from the API while it runs
// attempt 1 (after one heartbeat got through): its heartbeats are dropped
// while its handler keeps running (its process leases still reach the
// events queue). The SDK ends
// the handler's ctx (cause ErrLeaseLost) before the attempt's lease ends
// and reports nothing; the scheduler finds the attempt LOST and queues
// attempt 2 only after attempt 1's lease end plus the max clock skew, by
// which time the cut-off handler had stopped. The evidence window (1 s) is
// shorter than the skew (3 s), so the skew is what holds the retry back.
func TestCutOffWorkerStopsBeforeItsRetryStarts(t *testing.T) {
	const skew = 3 * time.Second
	s := startStack(t, devstack.Options{MaxClockSkew: skew})
	net := &partition{leases: map[int]time.Time{}}
	type stop struct {
		at       time.Time
		cause    error
		deadline time.Time
	}
	stopped := make(chan stop, 1)
	var attempt2Started atomic.Int64
	s.runWorker("default", worker.Config{Name: "cutoff", Concurrency: 2, HTTPClient: &http.Client{Transport: net, Timeout: 5 * time.Second}},
		func(ctx context.Context, task worker.Task) error {
			if task.Attempt > 1 {
				attempt2Started.Store(time.Now().UnixNano())
				return nil
			}
			// The partition begins once a heartbeat got through (the
			// fencing deadline moved on).
			first := task.FencingDeadline()
			for !task.FencingDeadline().After(first) && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			net.cut.Store(true)
			<-ctx.Done() // the work goes on until the worker stops it
			stopped <- stop{at: time.Now(), cause: context.Cause(ctx), deadline: task.FencingDeadline()}
			return nil // a success that must never be reported
		})
	// A 9 s heartbeat timeout: a 3 s beat, so the SDK stops the handler 3 s
	// before the lease ends (roomy enough for a slow, shared machine, where
	// a claim's answer may take a second or two).
	s.createJob(quickJob("cut-off", map[string]any{
		"timeouts": map[string]any{"heartbeat": "9s", "queue": "30s", "cancel": "2s", "run": "1m"},
	}))
	id := s.trigger("cut-off", nil)

	var st stop
	select {
	case st = <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the cut-off handler's ctx never ended")
	}
	if !errors.Is(st.cause, worker.ErrLeaseLost) {
		t.Fatalf("cut-off handler's ctx ended with %v, want ErrLeaseLost", st.cause)
	}
	leaseEnd := net.lease(1)
	if leaseEnd.IsZero() {
		t.Fatal("attempt 1 was granted no lease")
	}
	if !st.at.Before(leaseEnd) || st.at.Before(st.deadline) {
		t.Fatalf("handler stopped at %s: want at or after its fencing deadline %s and before the lease end %s", st.at, st.deadline, leaseEnd)
	}

	d := s.waitRun(id, 60*time.Second, "SUCCEEDED", "FAILED")
	if d.Run.ExecutionState != "SUCCEEDED" {
		t.Fatalf("run %+v", d.Run)
	}
	main := s.runDetail(id).task("main")
	if main.Attempt != 2 || len(main.Attempts) != 2 {
		t.Fatalf("task %+v, want attempt 2 to have run", main)
	}
	a1, a2 := main.attempt(t, 1), main.attempt(t, 2)
	if a1.State != "LOST" || str(a1.ErrorCategory) != "lost" || len(a1.LateEvents) != 0 {
		t.Fatalf("attempt 1 %+v (category %s), want LOST with nothing reported", a1, str(a1.ErrorCategory))
	}
	queued := at(t, "attempt 2 queued_at", a2.QueuedAt)
	if fence := leaseEnd.Add(skew); queued.Before(fence) {
		t.Fatalf("attempt 2 queued at %s, %s before attempt 1's lease end + skew %s", queued, fence.Sub(queued), fence)
	}
	if !st.at.Before(queued) {
		t.Fatalf("attempt 2 queued at %s, before the cut-off handler stopped at %s", queued, st.at)
	}
	if started := time.Unix(0, attempt2Started.Load()); !st.at.Before(started) {
		t.Fatalf("attempt 2's handler started at %s, before attempt 1's stopped at %s", started, st.at)
	}
	if net.dropped.Load() == 0 {
		t.Fatal("no heartbeat was dropped: the partition did not happen")
	}
	t.Logf("attempt 1: lease end %s, fencing deadline %s, handler stopped %s; attempt 2 queued %s; heartbeats dropped %d",
		leaseEnd, st.deadline, st.at, queued, net.dropped.Load())
	h := s.records(id, "main")
	expectStates(t, h, "CREATED", "SCHEDULED", "QUEUED", "RUNNING",
		"LOST", "UP_FOR_RETRY", "SCHEDULED", "QUEUED", "RUNNING", "SUCCEEDED")
	if r := h[5]; r.Event != "evidence.window_expired" || r.Attempt != 1 {
		t.Fatalf("LOST resolved by %s for attempt %d, want evidence.window_expired\n%s", r.Event, r.Attempt, describe(h))
	}
}
