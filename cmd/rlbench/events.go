package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/eventpattern"
)

// eventJobs is how many jobs' on_event patterns the matching figure
// indexes.
const eventJobs = 10000

// events measures event-triggered runs: event_match_us, one event matched
// against the on_event patterns of 10,000 jobs through the index (pure
// CPU, no I/O), and event_to_run_ms, from POST /v1/events/put until the
// run it starts is listed, on the local stack.
func (b *bench) events(ctx context.Context, n int) error {
	matchUS, hits, err := eventMatch(2000)
	if err != nil {
		return err
	}
	b.rep.figure("event_match_us", quantile(matchUS, 0.5), "us")
	b.rep.figure("event_match_p99_us", quantile(matchUS, 0.99), "us")

	st, err := b.startStack(ctx, devstack.Options{})
	if err != nil {
		return err
	}
	defer st.Stop(context.Background())
	api := newAPIClient(st.Info.APIURL, st.Info.APIKey)
	if err := api.createJob(ctx, map[string]any{"name": "orders", "pool": pool, "on_event": []any{map[string]any{
		"pattern": map[string]any{"source": []any{"shop"}, "detail-type": []any{"Order Placed"}},
		"params":  map[string]any{"order": "{{.Event.detail.order_id}}"},
	}}}); err != nil {
		return err
	}
	var toRun []float64
	for i := range n {
		t0 := time.Now()
		body := map[string]any{"Entries": []any{map[string]any{"Source": "shop", "DetailType": "Order Placed",
			"Detail": fmt.Sprintf(`{"order_id": "o-%d"}`, i)}}}
		if _, err := api.do(ctx, http.MethodPost, "/v1/events/put", body, http.StatusOK); err != nil {
			return err
		}
		if err := waitListed(ctx, api, "orders", i+1, 10*time.Second); err != nil {
			return err
		}
		toRun = append(toRun, ms(time.Since(t0)))
	}
	b.rep.figure("event_to_run_p50_ms", quantile(toRun, 0.5), "ms")
	b.rep.figure("event_to_run_ms", quantile(toRun, 0.99), "ms")
	b.rep.note("events: one event against %d jobs' on_event through the index: p50 %.1f us, p99 %.1f us (%.1f jobs matched an event on average; target <= 50 us)\n"+
		"  event put -> its run listed, %d events one after another: p50 %.0f ms, p99 %.0f ms (target p99 <= 500 ms)",
		eventJobs, quantile(matchUS, 0.5), quantile(matchUS, 0.99), hits, n, quantile(toRun, 0.5), quantile(toRun, 0.99))
	return nil
}

// waitListed polls the job's run listing until it holds want runs.
func waitListed(ctx context.Context, api *apiClient, job string, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		raw, err := api.do(ctx, http.MethodGet, "/v1/runs?limit=500&job="+job, nil, http.StatusOK)
		if err != nil {
			return err
		}
		var page struct {
			Runs []json.RawMessage `json:"runs"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		if len(page.Runs) >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("job %s: %d runs listed after %s, want %d", job, len(page.Runs), within, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// eventMatch indexes eventJobs jobs' patterns over 100 sources and 10
// detail-types (one job in 50 matching a source prefix, one in 20 any
// detail-type, one in 3 with a second entry) and times `events` events
// through the index, in microseconds each; hits is the mean of jobs
// matched.
func eventMatch(events int) (us []float64, hits float64, err error) {
	compile := func(s string) (*eventpattern.Pattern, error) { return eventpattern.Compile([]byte(s)) }
	entries := make([]eventpattern.Entry, eventJobs)
	for i := range entries {
		src, dt := fmt.Sprintf("app.svc%d", i%100), fmt.Sprintf("Type%d", (i/100)%10)
		var defs []string
		switch {
		case i%50 == 7:
			defs = append(defs, fmt.Sprintf(`{"source": [{"prefix": "app.svc%d"}], "detail": {"tenant": ["t%d"]}}`, i%100, i%7))
		case i%20 == 3:
			defs = append(defs, fmt.Sprintf(`{"source": [%q], "detail": {"amount": [{"numeric": [">", %d]}]}}`, src, i%1000))
		default:
			defs = append(defs, fmt.Sprintf(`{"source": [%q], "detail-type": [%q], "detail": {"tenant": ["t%d"], "state": [{"anything-but": "draft"}]}}`, src, dt, i%7))
		}
		if i%3 == 0 {
			defs = append(defs, fmt.Sprintf(`{"source": [%q], "detail-type": [%q, "Other"]}`, src, dt))
		}
		entries[i].Key = fmt.Sprintf("job-%05d", i)
		for _, d := range defs {
			p, err := compile(d)
			if err != nil {
				return nil, 0, err
			}
			entries[i].Patterns = append(entries[i].Patterns, p)
		}
	}
	ix := eventpattern.NewIndex(entries)
	total := 0
	for i := range events {
		ev, err := eventpattern.DecodeEvent([]byte(fmt.Sprintf(`{"id": "e%d", "source": "app.svc%d", "detail-type": "Type%d", "account": "123456789012",
			"region": "eu-west-1", "resources": [], "detail": {"tenant": "t%d", "state": "placed", "amount": %d}}`, i, i%100, (i/7)%10, i%7, i%1500)))
		if err != nil {
			return nil, 0, err
		}
		t0 := time.Now()
		total += len(ix.Match(ev))
		us = append(us, float64(time.Since(t0))/float64(time.Microsecond))
	}
	return us, float64(total) / float64(events), nil
}
