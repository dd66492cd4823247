// Package tests holds runledger's end-to-end tests: each starts the embedded
// local stack (the same handlers Lambda runs, behind the local adapters) on
// its own table and queues, against real DynamoDB Local and the fauxqs SQS
// emulator, and drives it through the HTTP API, the worker SDK and the
// queues. No test sleeps to wait for a state: every wait polls a condition
// with a deadline.
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/api/apitest"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/worker"
)

var env *emulator.Env

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[len(os.Args)-1] == ecsContainerArg {
		os.Exit(ecsContainer()) // a local ecs task of the executor tests
	}
	emulatortest.Main(m, func(e *emulator.Env) error {
		env = e
		return nil
	})
}

var stackSeq atomic.Int64

// stack is a running local stack for one test.
type stack struct {
	*devstack.Stack
	t    *testing.T
	opts devstack.Options
	url  string
	key  string
}

// startStack starts a local stack on a fresh table and queues; it is stopped
// when the test ends. Ticks are fast so that timers fire promptly.
func startStack(t *testing.T, opts devstack.Options) *stack {
	t.Helper()
	if opts.Name == "" {
		opts.Name = fmt.Sprintf("e2e%d-%d", os.Getpid(), stackSeq.Add(1))
	}
	opts.Env = env
	if opts.ListenAddr == "" {
		opts.ListenAddr = "127.0.0.1:0"
	}
	if opts.TickInterval == 0 {
		opts.TickInterval = 250 * time.Millisecond
	}
	if opts.APIKey == "" {
		opts.APIKey = "e2e-key"
	}
	if opts.MaxClockSkew == 0 {
		// Short, so that lost attempts are retried promptly; the fencing
		// test sets its own.
		opts.MaxClockSkew = 200 * time.Millisecond
	}
	if len(opts.Pools) == 0 {
		opts.Pools = []string{"default", "demo"}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
		if os.Getenv("RUNLEDGER_E2E_LOG") != "" {
			opts.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
		}
	}
	if opts.WrapAPI == nil {
		opts.WrapAPI = checkAnswers(t)
	}
	s := &stack{t: t, opts: opts}
	s.start()
	t.Cleanup(func() { s.stop() })
	return s
}

// checkAnswers checks every answer the API gives during the test against
// the OpenAPI document (shared/api/openapi.yaml); a mismatch fails the
// test, so the document cannot drift from the server.
func checkAnswers(t *testing.T) func(http.Handler) http.Handler {
	v, err := apitest.New()
	if err != nil {
		t.Fatal(err)
	}
	return func(h http.Handler) http.Handler {
		return v.Middleware(h, func(err error) { t.Errorf("OpenAPI: %v", err) })
	}
}

func (s *stack) start() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, s.opts)
	if err != nil {
		s.t.Fatalf("start local stack: %v", err)
	}
	s.Stack, s.url, s.key = st, st.Info.APIURL, s.opts.APIKey
}

func (s *stack) stop() {
	if s.Stack == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Stack.Stop(ctx); err != nil {
		s.t.Errorf("stop local stack: %v", err)
	}
	s.Stack = nil
}

// restart stops every handler and starts them again on the same table and
// queues (the emulators keep running): nothing may live only in memory.
func (s *stack) restart() {
	s.t.Helper()
	s.stop()
	s.opts.ListenAddr = "127.0.0.1:0"
	s.start()
}

// reply is an HTTP answer with its JSON body.
type reply struct {
	Status int
	Body   map[string]any
	Raw    []byte
}

func (r reply) code() string {
	c, _ := r.Body["code"].(string)
	return c
}

func (r reply) message() string {
	m, _ := r.Body["message"].(string)
	return m
}

// call sends a request with the API key; body may be nil, a string (sent
// as is) or a value (JSON-encoded).
func (s *stack) call(method, path string, body any, headers ...string) reply {
	s.t.Helper()
	return s.callAs("Bearer "+s.key, method, path, body, headers...)
}

func (s *stack) callAs(auth, method, path string, body any, headers ...string) reply {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{Status: resp.StatusCode, Raw: raw}
	if len(raw) > 0 {
		_ = json.Unmarshal(raw, &r.Body)
	}
	return r
}

// must fails the test unless the reply has the status.
func (r reply) must(t *testing.T, status int) reply {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Raw)
	}
	return r
}

// createJob creates a job from a JSON definition.
func (s *stack) createJob(def map[string]any) {
	s.t.Helper()
	s.call("POST", "/v1/jobs", def).must(s.t, http.StatusCreated)
}

// trigger starts a run and returns its id.
func (s *stack) trigger(job string, body any) string {
	s.t.Helper()
	r := s.call("POST", "/v1/jobs/"+job+"/runs", body).must(s.t, http.StatusCreated)
	return r.Body["run"].(map[string]any)["id"].(string)
}

// runDoc is GET /v1/runs/{run} decoded.
type runDoc struct {
	Run struct {
		ID               string  `json:"id"`
		Job              string  `json:"job"`
		ExecutionState   string  `json:"execution_state"`
		PublicationState string  `json:"publication_state"`
		Status           string  `json:"status"`
		EndedAt          *string `json:"ended_at"`
		LogicalTime      string  `json:"logical_time"`
	} `json:"run"`
	Tasks []taskDoc `json:"tasks"`
}

type taskDoc struct {
	Task            string  `json:"task"`
	State           string  `json:"state"`
	Status          string  `json:"status"`
	Attempt         int     `json:"attempt"`
	CancelRequested bool    `json:"cancel_requested"`
	RetryAt         *string `json:"retry_at"`
	Metrics         struct {
		DependencyWaitMS *int64 `json:"dependency_wait_ms"`
		QueueWaitMS      *int64 `json:"queue_wait_ms"`
		RunMS            *int64 `json:"run_ms"`
	} `json:"metrics"`
	Attempts []attemptDoc `json:"attempts"`
}

type attemptDoc struct {
	N             int     `json:"n"`
	State         string  `json:"state"`
	WorkerID      *string `json:"worker_id"`
	StartedAt     *string `json:"started_at"`
	EndedAt       *string `json:"ended_at"`
	ExitCode      *int    `json:"exit_code"`
	ErrorCategory *string `json:"error_category"`
	LateEvents    []struct {
		EventID string `json:"event_id"`
		Event   string `json:"event"`
		Outcome string `json:"outcome"`
	} `json:"late_events"`
}

func (s *stack) run(id string) runDoc {
	s.t.Helper()
	r := s.call("GET", "/v1/runs/"+id, nil).must(s.t, http.StatusOK)
	var d runDoc
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		s.t.Fatal(err)
	}
	return d
}

func (d runDoc) task(id string) taskDoc {
	for _, t := range d.Tasks {
		if t.Task == id {
			return t
		}
	}
	return taskDoc{}
}

// transition is one history record.
type transition struct {
	Seq      int64             `json:"seq"`
	From     string            `json:"from"`
	To       string            `json:"to"`
	Event    string            `json:"event"`
	Actor    string            `json:"actor"`
	Attempt  int               `json:"attempt"`
	Evidence map[string]string `json:"evidence"`
	Reason   string            `json:"reason"`
	Operator string            `json:"operator"`
	Scope    string            `json:"scope"`
}

func (s *stack) history(run, task string) []transition {
	s.t.Helper()
	r := s.call("GET", "/v1/runs/"+run+"/tasks/"+task+"/history?limit=1000", nil).must(s.t, http.StatusOK)
	var d struct {
		Transitions []transition `json:"transitions"`
	}
	if err := json.Unmarshal(r.Raw, &d); err != nil {
		s.t.Fatal(err)
	}
	return d.Transitions
}

// states lists the "to" states of a history, in order.
func states(h []transition) []string {
	var out []string
	for _, tr := range h {
		out = append(out, tr.To)
	}
	return out
}

// eventually polls cond until it holds or the deadline passes; cond returns
// whether it holds and what it saw, for the failure message.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	pause := 20 * time.Millisecond
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last seen: %s", what, within, last)
		}
		time.Sleep(pause) // a poll interval, not a wait for a state
		pause = min(pause*2, 250*time.Millisecond)
	}
}

// waitRun polls the run until its execution state is one of want.
func (s *stack) waitRun(id string, within time.Duration, want ...string) runDoc {
	s.t.Helper()
	var d runDoc
	eventually(s.t, within, "run "+id+" reaches "+strings.Join(want, "/"), func() (bool, string) {
		d = s.run(id)
		for _, w := range want {
			if d.Run.ExecutionState == w {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s %+v", d.Run.ExecutionState, d.Tasks)
	})
	return d
}

// waitTask polls until the task's state is want.
func (s *stack) waitTask(run, task, want string, within time.Duration) taskDoc {
	s.t.Helper()
	var td taskDoc
	eventually(s.t, within, fmt.Sprintf("task %s/%s reaches %s", run, task, want), func() (bool, string) {
		td = s.run(run).task(task)
		return td.State == want, fmt.Sprintf("%s attempt %d", td.State, td.Attempt)
	})
	return td
}

// runWorker runs an SDK worker against the stack's current URL. Fields of
// cfg left empty take the stack's values (API URL, queues of pool, queue
// client, logger) and test-friendly intervals. It returns the worker and a
// function that stops it (running handlers may finish and report); it is
// stopped when the test ends in any case.
func (s *stack) runWorker(pool string, cfg worker.Config, h worker.Handler) (*worker.Worker, func()) {
	s.t.Helper()
	cfg.APIURL = s.url
	cfg.PoolQueueURL = s.Info.Queues[pool]
	cfg.EventsQueueURL = s.Info.Queues["events"]
	cfg.Queue = s.Queue
	if cfg.Logger == nil {
		cfg.Logger = s.opts.Logger
	}
	if cfg.VisibilityTimeout == 0 {
		cfg.VisibilityTimeout = 10 * time.Second
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = time.Second
	}
	w, err := worker.New(cfg, h)
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	stop := sync.OnceFunc(func() {
		cancel()
		<-done
	})
	s.t.Cleanup(stop)
	return w, stop
}

// startWorker runs an SDK worker with handler h on pool until the test ends.
func (s *stack) startWorker(pool, name string, concurrency int, h worker.Handler) {
	s.t.Helper()
	s.runWorker(pool, worker.Config{Name: name, Concurrency: concurrency}, h)
}
