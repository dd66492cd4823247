package worker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

var sqsClient *queue.Client

func TestMain(m *testing.M) {
	emulatortest.Main(m, func(env *emulator.Env) error {
		sqsClient = queue.New(env.SQSClient())
		return nil
	})
}

// waitLimit bounds every poll for a state: generous, because a shared
// two-core machine can be slow; a passing test never waits it out.
const waitLimit = 30 * time.Second

// spyQueue passes every call to the real SQS emulator and records the
// calls in order, so a test can check what happened before what. failSend
// can refuse a send before it reaches the queue.
type spyQueue struct {
	real     *queue.Client
	mu       sync.Mutex
	ops      []spyOp
	failSend func(queueURL, body string) error
	// beforeBatch, when set, runs before each batch request goes on.
	beforeBatch func(op, queueURL string)
	// batches counts the batch requests by op and queue.
	batches map[string]int
}

// batch counts one batch request and runs beforeBatch.
func (s *spyQueue) batch(op, queueURL string) {
	s.mu.Lock()
	if s.batches == nil {
		s.batches = map[string]int{}
	}
	s.batches[op+" "+queueURL]++
	hook := s.beforeBatch
	s.mu.Unlock()
	if hook != nil {
		hook(op, queueURL)
	}
}

// batchCount is how many batch requests of op went to queueURL.
func (s *spyQueue) batchCount(op, queueURL string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batches[op+" "+queueURL]
}

type spyOp struct {
	Op, Queue, Body string
	Err             error
}

func (s *spyQueue) record(op spyOp) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
}

func (s *spyQueue) Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error) {
	if err := s.refuse(queueURL, body); err != nil {
		return "", err
	}
	id, err := s.real.Send(ctx, queueURL, body, attrs)
	s.record(spyOp{Op: "send", Queue: queueURL, Body: body, Err: err})
	return id, err
}

// refuse applies failSend, recording a refused send.
func (s *spyQueue) refuse(queueURL, body string) error {
	s.mu.Lock()
	fail := s.failSend
	s.mu.Unlock()
	if fail == nil {
		return nil
	}
	err := fail(queueURL, body)
	if err != nil {
		s.record(spyOp{Op: "send", Queue: queueURL, Body: body, Err: err})
	}
	return err
}

// SendBatch records each entry as a send; failSend refuses entries one by
// one, as SQS refuses them, and the rest go to the emulator in one batch.
func (s *spyQueue) SendBatch(ctx context.Context, queueURL string, entries []queue.Entry) ([]queue.Result, error) {
	s.batch("send", queueURL)
	results := make([]queue.Result, len(entries))
	var pass []queue.Entry
	var at []int
	for i, e := range entries {
		if err := s.refuse(queueURL, e.Body); err != nil {
			results[i].Err = err
			continue
		}
		pass, at = append(pass, e), append(at, i)
	}
	if len(pass) > 0 {
		sent, _ := s.real.SendBatch(ctx, queueURL, pass)
		for j, r := range sent {
			results[at[j]] = r
			s.record(spyOp{Op: "send", Queue: queueURL, Body: pass[j].Body, Err: r.Err})
		}
	}
	var errs []error
	for _, r := range results {
		errs = append(errs, r.Err)
	}
	return results, errors.Join(errs...)
}

func (s *spyQueue) Receive(ctx context.Context, queueURL string, opts queue.ReceiveOptions) ([]queue.Message, error) {
	return s.real.Receive(ctx, queueURL, opts)
}

// DeleteBatch records each entry as a delete.
func (s *spyQueue) DeleteBatch(ctx context.Context, queueURL string, receiptHandles []string) ([]queue.Result, error) {
	s.batch("delete", queueURL)
	results, err := s.real.DeleteBatch(ctx, queueURL, receiptHandles)
	for _, r := range results {
		s.record(spyOp{Op: "delete", Queue: queueURL, Err: r.Err})
	}
	return results, err
}

func (s *spyQueue) ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error {
	err := s.real.ChangeVisibility(ctx, queueURL, receiptHandle, timeout)
	s.record(spyOp{Op: "change_visibility", Queue: queueURL, Err: err})
	return err
}

func (s *spyQueue) opsSnapshot() []spyOp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]spyOp(nil), s.ops...)
}

// count counts recorded calls of op on queueURL that succeeded.
func (s *spyQueue) count(op, queueURL string) int {
	n := 0
	for _, o := range s.opsSnapshot() {
		if o.Op == op && o.Queue == queueURL && o.Err == nil {
			n++
		}
	}
	return n
}

// completionSends are the completion bodies sent (or tried) to queueURL.
func (s *spyQueue) completionSends(queueURL string) []spyOp {
	var out []spyOp
	for _, o := range s.opsSnapshot() {
		if o.Op == "send" && o.Queue == queueURL {
			if ev, err := protocol.DecodeEvent(o.Body); err == nil && ev.Completion != nil {
				out = append(out, o)
			}
		}
	}
	return out
}

// fixture is one test's world: the protocol peer, a fresh pool queue and
// events queue on the emulator, and what arrived on the events queue.
type fixture struct {
	t            *testing.T
	peer         *peer
	apiURL       string
	pool, events string
	q            *spyQueue

	mu          sync.Mutex
	completions []worker.Completion
	leases      []worker.Lease
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	p, srv := newPeer(t)
	f := &fixture{t: t, peer: p, apiURL: srv.URL, q: &spyQueue{real: sqsClient}}
	f.pool = f.newQueue("pool")
	f.events = f.newQueue("events")
	return f
}

func (f *fixture) newQueue(kind string) string {
	f.t.Helper()
	base := unsafeName.ReplaceAllString(f.t.Name(), "-")
	if len(base) > 40 {
		base = base[len(base)-40:]
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	name := strings.Trim(base, "-") + "-" + kind + "-" + hex.EncodeToString(suffix[:])
	created, err := sqsClient.CreateQueue(f.t.Context(), queue.Spec{Name: name})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		if err := sqsClient.DeleteQueue(context.Background(), created.URL); err != nil {
			f.t.Error(err)
		}
	})
	return created.URL
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewJSONHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// config is a worker config against the fixture, with short intervals.
// Its completions go to the events queue, where these tests read them;
// complete_test.go tests the complete route first.
func (f *fixture) config(name string) worker.Config {
	return worker.Config{
		QueueCompletions: true,
		APIURL:           f.apiURL,
		PoolQueueURL:     f.pool,
		EventsQueueURL:   f.events,
		Name:             name,
		Queue:            f.q,
		Logger:           testLogger(f.t).With("test_worker", name),
		PollWait:         time.Second,
		LeaseInterval:    time.Second,
		ShutdownGrace:    5 * time.Second,
		StopTimeout:      time.Second,
	}
}

func (f *fixture) newWorker(cfg worker.Config, h worker.Handler) *worker.Worker {
	f.t.Helper()
	w, err := worker.New(cfg, h)
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

// start runs w in the background; stop ends Run's ctx and returns Run's
// error once it has returned. Cleanup stops it if the test did not.
func (f *fixture) start(w *worker.Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(waitLimit):
				runErr = errors.New("Run did not return after its ctx ended")
			}
		})
		return runErr
	}
	f.t.Cleanup(func() {
		if err := stop(); err != nil {
			f.t.Error(err)
		}
	})
	return stop
}

var attemptSeq struct {
	sync.Mutex
	n int
}

// newAttempt names a fresh attempt (run ids are unique per test binary).
func newAttempt(attempt int) worker.AttemptRef {
	attemptSeq.Lock()
	defer attemptSeq.Unlock()
	attemptSeq.n++
	return worker.AttemptRef{Run: fmt.Sprintf("run-%d", attemptSeq.n), Task: "main", Attempt: attempt}
}

// envelope is a dispatch envelope for ref with a fast heartbeat.
func envelope(ref worker.AttemptRef, token string) worker.Envelope {
	return worker.Envelope{
		Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, Token: token, Pool: "default",
		Payload:           json.RawMessage(`{"n":1}`),
		Params:            json.RawMessage(`{"day":"2026-01-02"}`),
		HeartbeatInterval: 50 * time.Millisecond,
		RunTimeout:        time.Minute,
		ClaimBy:           time.Now().Add(time.Hour),
	}
}

// send puts env on the pool queue as the scheduler does.
func (f *fixture) send(env worker.Envelope) {
	f.t.Helper()
	body, err := json.Marshal(env)
	if err != nil {
		f.t.Fatal(err)
	}
	attrs := map[string]string{"run": env.Run, "task": env.Task, "attempt": strconv.Itoa(env.Attempt)}
	if _, err := sqsClient.Send(f.t.Context(), f.pool, string(body), attrs); err != nil {
		f.t.Fatal(err)
	}
}

// dispatch registers a fresh attempt with the peer and sends its envelope.
func (f *fixture) dispatch(mutate func(*worker.Envelope)) worker.Envelope {
	f.t.Helper()
	ref := newAttempt(1)
	env := envelope(ref, "token-"+ref.Run)
	if mutate != nil {
		mutate(&env)
	}
	f.peer.store(f.t, env)
	f.send(env)
	return env
}

// waitFor polls an in-memory condition until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// collect receives what is on the events queue into the fixture.
func (f *fixture) collect() {
	f.t.Helper()
	msgs, err := sqsClient.Receive(f.t.Context(), f.events, queue.ReceiveOptions{MaxMessages: 10, Wait: 200 * time.Millisecond})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, m := range msgs {
		ev, err := protocol.DecodeEvent(m.Body)
		if err != nil {
			f.t.Fatalf("events queue message %q: %v", m.Body, err)
		}
		f.mu.Lock()
		switch {
		case ev.Completion != nil:
			f.completions = append(f.completions, *ev.Completion)
		case ev.Lease != nil:
			f.leases = append(f.leases, *ev.Lease)
		default:
			f.t.Fatalf("events queue message %q is neither a completion nor a lease", m.Body)
		}
		f.mu.Unlock()
		if err := sqsClient.Delete(f.t.Context(), f.events, m.ReceiptHandle); err != nil {
			f.t.Fatal(err)
		}
	}
}

// completion waits for the completion of ref on the events queue.
func (f *fixture) completion(ref worker.AttemptRef) worker.Completion {
	f.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		f.mu.Lock()
		for _, c := range f.completions {
			if c.Ref() == ref {
				f.mu.Unlock()
				return c
			}
		}
		f.mu.Unlock()
		if time.Now().After(deadline) {
			f.t.Fatalf("no completion of %s on the events queue", ref)
		}
		f.collect()
	}
}

// lease waits for a lease on the events queue that satisfies cond.
func (f *fixture) lease(what string, cond func(worker.Lease) bool) worker.Lease {
	f.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		f.mu.Lock()
		for _, l := range f.leases {
			if cond(l) {
				f.mu.Unlock()
				return l
			}
		}
		f.mu.Unlock()
		if time.Now().After(deadline) {
			f.t.Fatalf("no lease with %s on the events queue", what)
		}
		f.collect()
	}
}

// poolCounts reads the pool queue's counts on the emulator.
func (f *fixture) poolCounts() queue.Counts {
	f.t.Helper()
	c, err := sqsClient.Counts(f.t.Context(), f.pool)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// counter counts handler runs per attempt.
type counter struct {
	mu sync.Mutex
	n  map[worker.AttemptRef]int
}

func (c *counter) inc(ref worker.AttemptRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[worker.AttemptRef]int{}
	}
	c.n[ref]++
}

func (c *counter) get(ref worker.AttemptRef) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ref]
}
