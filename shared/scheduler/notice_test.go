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
