package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// noticeRecorder keeps what the service told its notice sink, its metrics
// writer and its Moved observer.
type noticeRecorder struct {
	mu      sync.Mutex
	notes   []protocol.Notice
	metrics bytes.Buffer
	moved   []scheduler.Moved
}

func (r *noticeRecorder) Publish(s protocol.Notice) {
	r.mu.Lock()
	r.notes = append(r.notes, s)
	r.mu.Unlock()
}
func (r *noticeRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.metrics.Write(b)
}
func (r *noticeRecorder) Moved(m scheduler.Moved) {
	r.mu.Lock()
	r.moved = append(r.moved, m)
	r.mu.Unlock()
}

func (r *noticeRecorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.notes {
		out = append(out, string(s.Type))
	}
	return out
}

// lines are the embedded-metric lines written, decoded.
func (r *noticeRecorder) lines(t *testing.T) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.metrics.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// metric finds the line of the named metric and answers its value and
// dimension sets.
func metricLine(lines []map[string]any, name string) (map[string]any, string, bool) {
	for _, l := range lines {
		if _, ok := l[name]; !ok {
			continue
		}
		aws := l["_aws"].(map[string]any)
		cw := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		return l, fmt.Sprint(cw["Dimensions"]), true
	}
	return nil, "", false
}

// newNoticeFixture is newFixture with the recorder as the service's notice
// sink, metrics writer and Moved observer.
func newNoticeFixture(t *testing.T) (*fixture, *noticeRecorder) {
	t.Helper()
	f := newFixture(t)
	rec := &noticeRecorder{}
	f.svc = mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Evidence: []scheduler.EvidenceProvider{f.ev},
		Notices: rec, Metrics: rec, Moved: rec.Moved,
	})
	return f, rec
}

// TestNoticesOfAFailedRun: a task failing for good raises task.failed and
// then run.failed, with the metrics TaskFailed, RunFailed and RunDuration
// (the last two also by job), and every change reaches Moved.
func TestNoticesOfAFailedRun(t *testing.T) {
	f, rec := newNoticeFixture(t)
	ctx := context.Background()
	run, envl := f.runningJob(t, `{"name":"j","retry":{"max_attempts":1}}`, "w@boot")
	f.clock.Advance(1500 * time.Millisecond)
	c := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: "done-1", Outcome: protocol.OutcomeFailed,
		ErrorCategory: "bad_input", Reason: "the file is empty"}
	if _, err := f.svc.Workers().Complete(ctx, c, envl.Token); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.types(), ","); got != "task.failed,run.failed" {
		t.Fatalf("notices %s, want task.failed,run.failed", got)
	}
	task, runSig := rec.notes[0], rec.notes[1]
	if task.Job != "j" || task.Run != run || task.Task != "main" || task.Attempt != 1 || task.State != "FAILED" || task.Reason != "the file is empty" {
		t.Errorf("task.failed %+v", task)
	}
	if runSig.Job != "j" || runSig.Run != run || runSig.Task != "" || runSig.State != "FAILED" || runSig.Reason != "tasks: main FAILED" || !runSig.Time.Equal(f.clock.Now().Truncate(time.Millisecond)) {
		t.Errorf("run.failed %+v", runSig)
	}
	lines := rec.lines(t)
	if l, dims, ok := metricLine(lines, "TaskFailed"); !ok || dims != "[[]]" || l["job"] != "j" || l["task"] != "main" {
		t.Errorf("TaskFailed line %v dims %s", l, dims)
	}
	if l, dims, ok := metricLine(lines, "RunFailed"); !ok || dims != "[[] [Job]]" || l["Job"] != "j" || l["RunFailed"] != float64(1) {
		t.Errorf("RunFailed line %v dims %s, want the value by job too", l, dims)
	}
	if l, dims, ok := metricLine(lines, "RunDuration"); !ok || dims != "[[] [Job]]" || l["RunDuration"] != float64(1500) {
		t.Errorf("RunDuration line %v dims %s, want 1500 ms by job too", l, dims)
	}
	if _, _, ok := metricLine(lines, "RunSucceeded"); ok {
		t.Error("a failed run counted as succeeded")
	}
	var path []string
	for _, m := range rec.moved {
		if m.Job != "j" {
			t.Errorf("moved %+v of another job", m)
		}
		path = append(path, string(m.From)+">"+string(m.To))
	}
	if got := strings.Join(path, " "); got != ">CREATED CREATED>SCHEDULED SCHEDULED>QUEUED QUEUED>RUNNING RUNNING>FAILED" {
		t.Fatalf("moved %s", got)
	}
	if last := rec.moved[len(rec.moved)-1]; last.Run != run || last.Task != "main" || !last.At.Equal(f.clock.Now()) {
		t.Errorf("the last change %+v, want run %s's main at %s", last, run, f.clock.Now())
	}
}

// TestNoticeOfALostTask: an expired lease raises task.lost and
// InstanceLost.
func TestNoticeOfALostTask(t *testing.T) {
	f, rec := newNoticeFixture(t)
	f.running(t, "w@boot")
	f.lose(t)
	if got := strings.Join(rec.types(), ","); got != "task.lost" {
		t.Fatalf("notices %s, want task.lost", got)
	}
	if s := rec.notes[0]; s.State != "LOST" || s.Attempt != 1 || s.Task != "main" {
		t.Errorf("task.lost %+v", s)
	}
	if _, _, ok := metricLine(rec.lines(t), "InstanceLost"); !ok {
		t.Error("no InstanceLost line")
	}
}

// TestDeadlineMissedOnce: a run unfinished at its job's deadline raises
// run.deadline_missed once, from the ticker's pass that its timer brings,
// however many passes and services see it afterwards; the run goes on.
func TestDeadlineMissedOnce(t *testing.T) {
	f, rec := newNoticeFixture(t)
	ctx := context.Background()
	run, envl := f.runningJob(t, `{"name":"j","deadline":"1m","timeouts":{"heartbeat":"10m"}}`, "w@boot")
	stored, err := f.st.GetRun(ctx, run)
	if err != nil || !stored.DeadlineAt.Equal(stored.CreatedAt.Add(time.Minute)) || !stored.TimerAt.Equal(stored.DeadlineAt) {
		t.Fatalf("run %+v (%v): want the deadline a minute after creation and the run's timer at it", stored, err)
	}
	f.clock.Advance(59 * time.Second)
	if _, err := f.svc.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.types()); n != 0 {
		t.Fatalf("%d notices before the deadline", n)
	}
	f.clock.Advance(time.Second)
	other := mustNew(f.st, f.q, scheduler.Config{Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Notices: rec, Metrics: rec})
	for range 3 {
		if _, err := f.svc.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		if err := other.AdvanceRun(ctx, run); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(rec.types(), ","); got != "run.deadline_missed" {
		t.Fatalf("notices %s, want one run.deadline_missed", got)
	}
	if s := rec.notes[0]; s.Run != run || s.Job != "j" || s.State != "RUNNING" || !strings.Contains(s.Reason, "1m0s") {
		t.Errorf("run.deadline_missed %+v", s)
	}
	if _, _, ok := metricLine(rec.lines(t), "DeadlineMissed"); !ok {
		t.Error("no DeadlineMissed line")
	}
	stored = f.readRun(t, run).Run
	if stored.ExecutionState != statemodel.RunRunning || stored.DeadlineMissedAt.IsZero() || !stored.TimerAt.After(f.clock.Now()) {
		t.Fatalf("run %+v: want it RUNNING still, the miss recorded, its timer back to the backstop", stored)
	}
	c := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: "done-1", Outcome: protocol.OutcomeSucceeded}
	if _, err := f.svc.Workers().Complete(ctx, c, envl.Token); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.types(), ","); got != "run.deadline_missed,run.succeeded" {
		t.Fatalf("notices %s, want the run's success after its missed deadline", got)
	}
}

// TestNoDeadlineNoNotice: a run that ends before its deadline raises only
// its end, and a memstore run without a deadline keeps its backstop timer.
func TestNoDeadlineNoNotice(t *testing.T) {
	f, rec := newNoticeFixture(t)
	ctx := context.Background()
	run, envl := f.runningJob(t, `{"name":"j","deadline":"1h"}`, "w@boot")
	c := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: "done-1", Outcome: protocol.OutcomeSucceeded}
	if _, err := f.svc.Workers().Complete(ctx, c, envl.Token); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Hour)
	if _, err := f.svc.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(rec.types(), ","); got != "run.succeeded" {
		t.Fatalf("notices %s, want run.succeeded only", got)
	}
}

// TestCompletionDeviation: a succeeded run's duration is measured against
// the median of its job's runs this process saw succeed before it: none
// for the first, the RunEnded observer told of each with what the metric
// line says; a failed run has none.
func TestCompletionDeviation(t *testing.T) {
	f := newFixture(t)
	rec := &noticeRecorder{}
	var mu sync.Mutex
	var ended []scheduler.RunEnded
	f.svc = mustNew(f.st, f.q, scheduler.Config{
		Pools: map[string]string{"default": f.pool}, Now: f.clock.Now, Metrics: rec,
		RunEnded: func(e scheduler.RunEnded) { mu.Lock(); ended = append(ended, e); mu.Unlock() },
	})
	ctx := context.Background()
	j, err := jobspec.Parse([]byte(`{"name":"j","retry":{"max_attempts":1}}`), f.svc.Jobs().ParseOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Jobs().CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		took    time.Duration
		outcome protocol.Outcome
	}{{2 * time.Second, protocol.OutcomeSucceeded}, {4 * time.Second, protocol.OutcomeSucceeded},
		{9 * time.Second, protocol.OutcomeFailed}, {5 * time.Second, protocol.OutcomeSucceeded}} {
		run, envl := f.triggered(t, "j", fmt.Sprintf("w%d", i))
		f.clock.Advance(c.took)
		done := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: fmt.Sprintf("done-%d", i), Outcome: c.outcome}
		if _, err := f.svc.Workers().Complete(ctx, done, envl.Token); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ended) != 4 {
		t.Fatalf("%d runs ended, want 4: %+v", len(ended), ended)
	}
	// Before the fourth, the succeeded ones took 2 s and 4 s: median 3 s.
	want := []struct {
		has bool
		dev time.Duration
	}{{false, 0}, {true, 2 * time.Second}, {false, 0}, {true, 2 * time.Second}}
	for i, w := range want {
		if e := ended[i]; e.HasDeviation != w.has || e.Deviation != w.dev || e.Job != "j" {
			t.Errorf("run %d ended %+v, want deviation %v (%v)", i, e, w.dev, w.has)
		}
	}
	var devs []float64
	for _, l := range rec.lines(t) {
		if v, ok := l[scheduler.MetricCompletionDeviation]; ok {
			devs = append(devs, v.(float64))
		}
	}
	if fmt.Sprint(devs) != "[2000 2000]" {
		t.Errorf("CompletionDeviation lines %v, want [2000 2000] ms", devs)
	}
}

// TestTransitionLagLine: a completion whose worker says it ended 1.5 s
// before the scheduler wrote it is a TransitionLag of 1500 ms naming its
// event, and Moved carries the same lag; the scheduler's own events write
// no lag line.
func TestTransitionLagLine(t *testing.T) {
	f, rec := newNoticeFixture(t)
	ctx := context.Background()
	run, envl := f.runningJob(t, `{"name":"j"}`, "w@boot")
	f.clock.Advance(3 * time.Second)
	c := protocol.Completion{Run: run, Task: "main", Attempt: 1, EventID: "done-1", Outcome: protocol.OutcomeSucceeded,
		EventTime: f.clock.Now().Add(-1500 * time.Millisecond)}
	if _, err := f.svc.Workers().Complete(ctx, c, envl.Token); err != nil {
		t.Fatal(err)
	}
	var lags []string
	for _, l := range rec.lines(t) {
		if v, ok := l[scheduler.MetricTransitionLag]; ok {
			lags = append(lags, fmt.Sprint(l["event"], " ", v))
		}
	}
	if fmt.Sprint(lags) != "[attempt.succeeded 1500]" {
		t.Errorf("TransitionLag lines %v, want one of 1500 ms for succeeded", lags)
	}
	last := rec.moved[len(rec.moved)-1]
	if lag, ok := last.Lag(); !ok || lag != 1500*time.Millisecond || last.Event != statemodel.EvSucceeded {
		t.Errorf("the last change %+v: lag %v %v, want 1.5s of succeeded", last, lag, ok)
	}
	if lag, ok := rec.moved[0].Lag(); !ok || lag != 0 || rec.moved[0].Event != statemodel.EvCreated {
		t.Errorf("the creation %+v: lag %v %v, want 0 of created", rec.moved[0], lag, ok)
	}
}

// TestOverdueInState: each pass writes how long the most overdue timer it
// listed has been due, for the states it acts on and those only, 0 for
// the ones with none due.
func TestOverdueInState(t *testing.T) {
	f, rec := newNoticeFixture(t)
	ctx := context.Background()
	run, _ := f.runningJob(t, `{"name":"j","timeouts":{"heartbeat":"10s"}}`, "w@boot")
	at, kind := f.instance(t, run).Snapshot.Timer()
	if kind != statemodel.TimerLease {
		t.Fatalf("timer %s, want the lease", kind)
	}
	f.clock.Advance(at.Add(42 * time.Second).Sub(f.clock.Now()))
	if _, err := f.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, l := range rec.lines(t) {
		if v, ok := l[scheduler.MetricOverdueInState]; ok {
			if _, dims, _ := metricLine([]map[string]any{l}, scheduler.MetricOverdueInState); dims != "[[State]]" {
				t.Errorf("dimensions %s, want [[State]]", dims)
			}
			got[l[scheduler.StateDimension].(string)] = v
		}
	}
	want := map[string]any{"QUEUED": 0.0, "RUNNING": 42.0, "LOST": 0.0, "CANCELLING": 0.0, "CREATED": 0.0, "SCHEDULED": 0.0, "UP_FOR_RETRY": 0.0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OverdueInState %v, want %v", got, want)
	}
}
