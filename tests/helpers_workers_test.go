package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

// Helpers of the retry, LOST, fencing and cancel scenarios: short-timeout
// job definitions, a "manual worker" that takes envelopes from a pool queue
// and speaks the worker protocol by hand, fuller decodings of the run and
// history answers (times, retry_at, late events), and an SDK worker whose
// logs the test can read.

// quickJob is a one-task job on the default pool whose timeouts are short
// enough that LOST, retries and cancel timeouts happen within seconds.
// Fields of over replace the defaults.
func quickJob(name string, over map[string]any) map[string]any {
	def := map[string]any{
		"name":            name,
		"pool":            "default",
		"payload":         map[string]any{"job": name},
		"retry":           map[string]any{"max_attempts": 2, "initial_interval": "200ms", "jitter": "none"},
		"timeouts":        map[string]any{"heartbeat": "2s", "queue": "30s", "cancel": "2s", "run": "1m"},
		"evidence_window": "1s",
	}
	for k, v := range over {
		def[k] = v
	}
	return def
}

// runDetail is GET /v1/runs/{run} with the fields these scenarios check
// beyond the harness's runDoc.
type runDetail struct {
	Run struct {
		ExecutionState string  `json:"execution_state"`
		Status         string  `json:"status"`
		EndedAt        *string `json:"ended_at"`
	} `json:"run"`
	Tasks []taskDetail `json:"tasks"`
}

type taskDetail struct {
	Task            string          `json:"task"`
	State           string          `json:"state"`
	Status          string          `json:"status"`
	Attempt         int             `json:"attempt"`
	RetryAt         *string         `json:"retry_at"`
	CancelRequested bool            `json:"cancel_requested"`
	Attempts        []attemptDetail `json:"attempts"`
}

type attemptDetail struct {
	N               int         `json:"n"`
	State           string      `json:"state"`
	WorkerID        *string     `json:"worker_id"`
	ExecutorID      *string     `json:"executor_id"`
	QueuedAt        *string     `json:"queued_at"`
	StartedAt       *string     `json:"started_at"`
	EndedAt         *string     `json:"ended_at"`
	LastHeartbeatAt *string     `json:"last_heartbeat_at"`
	ExitCode        *int        `json:"exit_code"`
	ErrorCategory   *string     `json:"error_category"`
	LateEvents      []lateEvent `json:"late_events"`
}

type lateEvent struct {
	EventID string `json:"event_id"`
	Event   string `json:"event"`
	Actor   string `json:"actor"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail"`
}

func (s *stack) runDetail(id string) runDetail {
	s.t.Helper()
	r := s.call("GET", "/v1/runs/"+id, nil).must(s.t, http.StatusOK)
	return decodeRunDetail(s.t, r)
}

func decodeRunDetail(t *testing.T, r reply) runDetail {
	t.Helper()
	var d runDetail
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		t.Fatalf("decode run: %v: %s", err, r.Raw)
	}
	return d
}

func (d runDetail) task(id string) taskDetail {
	for _, t := range d.Tasks {
		if t.Task == id {
			return t
		}
	}
	return taskDetail{}
}

// attempt returns attempt n's record; the test fails if there is none.
func (td taskDetail) attempt(t *testing.T, n int) attemptDetail {
	t.Helper()
	for _, a := range td.Attempts {
		if a.N == n {
			return a
		}
	}
	t.Fatalf("task %s has no attempt %d: %+v", td.Task, n, td.Attempts)
	return attemptDetail{}
}

// record is a history record with its times and event id.
type record struct {
	transition
	EventID    string  `json:"event_id"`
	EventTime  *string `json:"event_time"`
	ObservedAt *string `json:"observed_at"`
}

func (s *stack) records(run, task string) []record {
	s.t.Helper()
	r := s.call("GET", "/v1/runs/"+run+"/tasks/"+task+"/history?limit=1000", nil).must(s.t, http.StatusOK)
	var d struct {
		Transitions []record `json:"transitions"`
	}
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		s.t.Fatalf("decode history: %v: %s", err, r.Raw)
	}
	return d.Transitions
}

// describe renders a history compactly for failure messages.
func describe(h []record) string {
	parts := make([]string, len(h))
	for i, r := range h {
		parts[i] = fmt.Sprintf("%s->%s(%s by %s, attempt %d)", r.From, r.To, r.Event, r.Actor, r.Attempt)
	}
	return strings.Join(parts, " ")
}

func recordStates(h []record) []string {
	out := make([]string, len(h))
	for i, r := range h {
		out[i] = r.To
	}
	return out
}

// expectStates fails unless the history goes through exactly want.
func expectStates(t *testing.T, h []record, want ...string) {
	t.Helper()
	if got := recordStates(h); !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v\n%s", got, want, describe(h))
	}
}

// at parses an API time; the test fails if it is absent or malformed.
func at(t *testing.T, what string, s *string) time.Time {
	t.Helper()
	if s == nil {
		t.Fatalf("%s is null", what)
	}
	v, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		t.Fatalf("%s %q: %v", what, *s, err)
	}
	return v
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

// manualWorker takes envelopes from a pool queue itself and calls the
// worker routes by hand, so a test decides exactly which calls a "worker"
// makes: a claim and then silence, a late completion, a stale one.
type manualWorker struct {
	s     *stack
	t     *testing.T
	pool  string
	api   *worker.Client
	seq   int
	seqMu sync.Mutex
}

func (s *stack) manualWorker(pool string) *manualWorker {
	return &manualWorker{s: s, t: s.t, pool: pool, api: worker.NewClient(s.url, nil)}
}

// receive waits for the envelope of attempt n of the run's task on the
// pool queue and deletes its message, as a worker does once it holds the
// attempt. Envelopes of other attempts are dropped (their claims would be
// refused anyway); the test fails if the envelope does not come in time.
func (m *manualWorker) receive(run, task string, n int) (worker.Envelope, queue.Message) {
	m.t.Helper()
	url := m.s.Info.Queues[m.pool]
	deadline := time.Now().Add(30 * time.Second)
	var seen []string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := m.s.Queue.Receive(ctx, url, queue.ReceiveOptions{MaxMessages: 1, Wait: time.Second, VisibilityTimeout: 30 * time.Second})
		cancel()
		if err != nil {
			m.t.Fatalf("receive from pool %s: %v", m.pool, err)
		}
		for _, msg := range msgs {
			env, err := worker.ParseEnvelope(msg.Body)
			if err != nil {
				m.t.Fatalf("pool %s carried a message that is not an envelope: %v: %s", m.pool, err, msg.Body)
			}
			m.delete(msg)
			if env.Run == run && env.Task == task && env.Attempt == n {
				return env, msg
			}
			seen = append(seen, env.Ref().String())
		}
	}
	m.t.Fatalf("no envelope for %s/%s#%d on pool %s within 30s; saw %v", run, task, n, m.pool, seen)
	return worker.Envelope{}, queue.Message{}
}

func (m *manualWorker) delete(msg queue.Message) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.s.Queue.Delete(ctx, m.s.Info.Queues[m.pool], msg.ReceiptHandle); err != nil {
		m.t.Fatalf("delete message %s: %v", msg.ID, err)
	}
}

func (m *manualWorker) eventID(kind string) string {
	m.seqMu.Lock()
	defer m.seqMu.Unlock()
	m.seq++
	return fmt.Sprintf("manual-%s-%d", kind, m.seq)
}

func (m *manualWorker) claim(env worker.Envelope, workerID string) (worker.ClaimResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return m.api.Claim(ctx, env.Token, worker.ClaimRequest{
		Run: env.Run, Task: env.Task, Attempt: env.Attempt, WorkerID: workerID, EventID: m.eventID("claim"),
	})
}

// mustClaim claims the attempt and fails the test unless the claim wins.
func (m *manualWorker) mustClaim(env worker.Envelope, workerID string) {
	m.t.Helper()
	resp, err := m.claim(env, workerID)
	if err != nil {
		m.t.Fatalf("claim %s as %s: %v", env.Ref(), workerID, err)
	}
	if !resp.Claimed || resp.LeaseExpiresAt.IsZero() {
		m.t.Fatalf("claim %s as %s: answer %+v", env.Ref(), workerID, resp)
	}
}

func (m *manualWorker) heartbeat(env worker.Envelope) (worker.HeartbeatResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return m.api.Heartbeat(ctx, env.Token, worker.HeartbeatRequest{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: m.eventID("beat")})
}

// complete reports the attempt's end over HTTP with a fresh event id,
// which it returns with the answer.
func (m *manualWorker) complete(env worker.Envelope, c worker.Completion) (string, worker.CompleteResponse, error) {
	c.Run, c.Task, c.Attempt = env.Run, env.Task, env.Attempt
	if c.EventID == "" {
		c.EventID = m.eventID("complete")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := m.api.Complete(ctx, env.Token, c)
	return c.EventID, resp, err
}

// keepBeating heartbeats the attempt every interval, as a live worker
// does, until the returned stop is called; stop reports the first error.
func (m *manualWorker) keepBeating(env worker.Envelope, interval time.Duration) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	m.t.Cleanup(cancel)
	errc := make(chan error, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				errc <- nil
				return
			case <-tick.C:
			}
			if _, err := m.heartbeat(env); err != nil {
				errc <- fmt.Errorf("heartbeat %s: %w", env.Ref(), err)
				return
			}
		}
	}()
	return func() error {
		cancel()
		return <-errc
	}
}

// logBook keeps the records an SDK worker logs, so a test can see what the
// worker was answered (a refused claim and its code).
type logBook struct {
	mu   sync.Mutex
	recs []logEntry
}

type logEntry struct {
	Msg   string
	Attrs map[string]any
}

func (b *logBook) logger() *slog.Logger { return slog.New(&bookHandler{book: b}) }

// find returns the entries with message msg.
func (b *logBook) find(msg string) []logEntry {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []logEntry
	for _, e := range b.recs {
		if e.Msg == msg {
			out = append(out, e)
		}
	}
	return out
}

type bookHandler struct {
	book  *logBook
	attrs []slog.Attr
}

func (h *bookHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *bookHandler) Handle(_ context.Context, r slog.Record) error {
	e := logEntry{Msg: r.Message, Attrs: map[string]any{}}
	for _, a := range h.attrs {
		e.Attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		e.Attrs[a.Key] = a.Value.Any()
		return true
	})
	h.book.mu.Lock()
	h.book.recs = append(h.book.recs, e)
	h.book.mu.Unlock()
	return nil
}

func (h *bookHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &bookHandler{book: h.book, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *bookHandler) WithGroup(string) slog.Handler { return h }

// startLoggedWorker is startWorker with the worker's logs going to logger;
// it returns the worker, whose ID is what its claims carry.
func (s *stack) startLoggedWorker(pool, name string, logger *slog.Logger, h worker.Handler) *worker.Worker {
	s.t.Helper()
	w, _ := s.runWorker(pool, worker.Config{Name: name, Concurrency: 1, Logger: logger, ShutdownGrace: 2 * time.Second}, h)
	return w
}

// waitDetail polls until the task's state is want and returns its detail.
func (s *stack) waitDetail(run, task, want string, within time.Duration) taskDetail {
	s.t.Helper()
	var td taskDetail
	eventually(s.t, within, fmt.Sprintf("task %s/%s reaches %s", run, task, want), func() (bool, string) {
		td = s.runDetail(run).task(task)
		return td.State == want, fmt.Sprintf("%s attempt %d", td.State, td.Attempt)
	})
	return td
}

// cancelTask posts a task cancel and returns the run the answer carries.
func (s *stack) cancelTask(run, task, reason string) runDetail {
	s.t.Helper()
	r := s.call("POST", "/v1/runs/"+run+"/tasks/"+task+"/cancel", map[string]any{"reason": reason}).must(s.t, http.StatusOK)
	return decodeRunDetail(s.t, r)
}
