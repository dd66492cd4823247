package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/worker"
)

// pool is the one worker pool every scenario's jobs use.
const pool = "bench"

// bench is what every scenario shares: the emulators (started once), the
// logger and the report.
type bench struct {
	env    *emulator.Env
	log    *slog.Logger
	rep    *report
	prefix string
	seq    int
	tables []string
}

// stackOptions fills the options of a scenario's stack: its own table and
// queues (a fresh name), the shared emulators, a free port.
func (b *bench) stackOptions(o devstack.Options) devstack.Options {
	b.seq++
	o.Env = b.env
	o.Name = fmt.Sprintf("%s%d", b.prefix, b.seq)
	o.ListenAddr = "127.0.0.1:0"
	o.APIKey = "rlbench"
	o.Pools = []string{pool}
	if o.Logger == nil {
		o.Logger = b.log
	}
	b.tables = append(b.tables, o.Name)
	return o
}

// startStack starts the embedded local stack (devstack) for one scenario.
func (b *bench) startStack(ctx context.Context, o devstack.Options) (*devstack.Stack, error) {
	st, err := devstack.Start(ctx, b.stackOptions(o))
	if err != nil {
		return nil, fmt.Errorf("start local stack: %w", err)
	}
	return st, nil
}

// dropTables deletes the scenarios' tables, so DynamoDB Local (in memory)
// gives their memory back.
func (b *bench) dropTables(ctx context.Context) {
	db := b.env.DynamoDBClient()
	for _, t := range b.tables {
		if err := store.DeleteTable(ctx, db, t); err != nil && !errors.Is(err, ledger.ErrNotFound) {
			b.log.WarnContext(ctx, "delete table", "table", t, "error", err.Error())
		}
	}
	b.tables = nil
}

// apiClient calls the stack's HTTP API with its key.
type apiClient struct {
	url, key string
	http     *http.Client
}

func newAPIClient(url, key string) *apiClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 128
	return &apiClient{url: url, key: key, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

func (c *apiClient) do(ctx context.Context, method, path string, body any, want int) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		enc, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return raw, fmt.Errorf("%s %s: status %d, want %d: %s", method, path, resp.StatusCode, want, raw)
	}
	return raw, nil
}

func (c *apiClient) createJob(ctx context.Context, def map[string]any) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs", def, http.StatusCreated)
	return err
}

// trigger starts a run of job and returns its id.
func (c *apiClient) trigger(ctx context.Context, job string, params map[string]any) (string, error) {
	var body any
	if params != nil {
		body = map[string]any{"params": params}
	}
	raw, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+job+"/runs", body, http.StatusCreated)
	if err != nil {
		return "", err
	}
	var r struct {
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Run.ID == "" {
		return "", fmt.Errorf("trigger %s: no run id in %s", job, raw)
	}
	return r.Run.ID, nil
}

// triggerMany starts n runs of job with at most inFlight API calls at once;
// params(i) gives run i's params (nil: none). ids[i] is run i.
func (c *apiClient) triggerMany(ctx context.Context, job string, n, inFlight int, params func(i int) map[string]any) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for i := range next {
				ids[i], errs[i] = c.trigger(ctx, job, params(i))
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return ids, errors.Join(errs...)
}

// benchWorker is an SDK worker on the scenario stack's pool, run in this
// process as a user's worker process would run; stop it before the stack.
func benchWorker(st *devstack.Stack, name string, concurrency int, h worker.Handler) (stop func(), err error) {
	return st.StartWorker(app.Worker{Pool: pool, Name: name, Concurrency: concurrency, Handler: h})
}

// failFirst is a no-op handler that fails the first attempt of a run whose
// params say {"fail_first": true}, and succeeds otherwise.
func failFirst(ctx context.Context, t worker.Task) error {
	if t.Attempt == 1 && len(t.Params) > 0 {
		var p struct {
			FailFirst bool `json:"fail_first"`
		}
		if json.Unmarshal(t.Params, &p) == nil && p.FailFirst {
			return worker.WithCategory(errors.New("first attempt fails by design"), "bench_failure")
		}
	}
	return nil
}

// pollWindow is how many unfinished runs waitRuns reads a round.
const pollWindow = 64

// waitRuns polls the runs until each has a terminal execution state, at most
// inFlight reads at once, and returns them by id. The pause between rounds
// grows from 10 ms to 200 ms; it paces the reads, it does not wait for a
// state.
func waitRuns(ctx context.Context, st *store.Store, ids []string, within time.Duration) (map[string]ledger.Run, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	done := make(map[string]ledger.Run, len(ids))
	pending := append([]string(nil), ids...)
	pause := 10 * time.Millisecond
	for {
		var mu sync.Mutex
		var still []string
		var firstErr error
		sem := make(chan struct{}, 16)
		var wg sync.WaitGroup
		// The oldest runs first, pollWindow a round: runs end roughly in
		// the order they started, and polling a thousand runs that wait
		// in a queue every round would load the store the bench measures.
		window := pending[:min(pollWindow, len(pending))]
		for _, id := range window {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				r, err := st.GetRun(ctx, id)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				case r.ExecutionState.Terminal():
					done[id] = r
				}
			})
		}
		wg.Wait()
		for _, id := range window {
			if _, ok := done[id]; !ok {
				still = append(still, id)
			}
		}
		pending = append(still, pending[len(window):]...)
		if len(pending) == 0 {
			return done, nil
		}
		if ctx.Err() != nil {
			return done, fmt.Errorf("%d of %d runs not finished within %s (first: %s; last error: %v)", len(pending), len(ids), within, pending[0], firstErr)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(pause*2, 200*time.Millisecond)
	}
}

func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelError
	if verbose {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
