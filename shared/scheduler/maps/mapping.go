package maps

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// CategoryInvalidMap: over did not render a JSON array within the limits.
const CategoryInvalidMap = "invalid_map"

// CategoryChildrenFailed: more children than tolerated ended other than
// SUCCEEDED.
const CategoryChildrenFailed = "children_failed"

// mapParentLease is the lease of a map task's attempt: it has no worker
// to heartbeat, and runs as long as its children do.
const mapParentLease = 365 * 24 * time.Hour

// releaseBatch bounds the children one step releases (and writes in one
// transaction): a map's first step runs in the write that started it (a
// trigger's answer waits for it), so a large max_parallel is reached over
// the next steps, each child's end releasing what room there is.
const releaseBatch = 25

// mapRecord is a map task's Instance.Map: its fan-out, and the timeouts
// its children take from the task (the map task's own attempt has no
// worker, so its lease and cancel wait are mapParentLease).
type mapRecord struct {
	jobspec.Map
	Heartbeat time.Duration `json:"heartbeat"`
	Cancel    time.Duration `json:"cancel"`
}

// WithMap makes nt a map task's NewTask when t is one.
func WithMap(nt *ledger.NewTask, t jobspec.Task) {
	if t.Map == nil {
		return
	}
	rec := mapRecord{Map: *t.Map, Heartbeat: nt.Policy.Timeouts.Heartbeat, Cancel: nt.Policy.Timeouts.Cancel}
	nt.Map, _ = json.Marshal(rec)
	nt.Policy.Timeouts.Heartbeat = mapParentLease
	nt.Policy.Timeouts.Cancel = mapParentLease
}

func mapRecordOf(inst ledger.Instance) (mapRecord, error) {
	var rec mapRecord
	if err := json.Unmarshal(inst.Map, &rec); err != nil {
		return rec, fmt.Errorf("map task %s: %w", inst.Key, err)
	}
	return rec, nil
}

// ParentKey is the map task of a child; false for a task that is no
// map's child.
func ParentKey(child ledger.InstanceKey) (ledger.InstanceKey, bool) {
	p, _, ok := ledger.ParseChild(child.Task)
	return ledger.InstanceKey{Run: child.Run, Task: p}, ok
}

// mapCache keeps what a map's steps need and never changes: its parent
// instance's static fields, its run, and its element chunks. Bounded.
type mapCache struct {
	parent *bounded[ledger.InstanceKey, mapParent]
	chunks *bounded[string, [][]byte]
}

// bounded is a map of at most mapCacheSize entries, emptied when full,
// safe for steps running at once.
type bounded[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]V
}

func (b *bounded[K, V]) get(k K) (V, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	return v, ok
}

func (b *bounded[K, V]) put(k K, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.m) >= mapCacheSize {
		clear(b.m)
	}
	b.m[k] = v
}

type mapParent struct {
	inst ledger.Instance
	run  ledger.Run
	rec  mapRecord
}

const mapCacheSize = 256

func newMapCache() *mapCache {
	return &mapCache{parent: &bounded[ledger.InstanceKey, mapParent]{m: map[ledger.InstanceKey]mapParent{}},
		chunks: &bounded[string, [][]byte]{m: map[string][][]byte{}}}
}

func (r *Room[E]) mapParentOf(ctx context.Context, key ledger.InstanceKey) (mapParent, error) {
	if p, ok := r.cache.parent.get(key); ok {
		return p, nil
	}
	inst, run, err := r.store.GetInstanceAndRun(ctx, key)
	if err != nil {
		return mapParent{}, err
	}
	rec, err := mapRecordOf(inst)
	if err != nil {
		return mapParent{}, err
	}
	inst.History, inst.Snapshot = nil, statemodel.Snapshot{}
	p := mapParent{inst: inst, run: run, rec: rec}
	r.cache.parent.put(key, p)
	return p, nil
}

func (r *Room[E]) mapItems(ctx context.Context, key ledger.InstanceKey, c int) ([][]byte, error) {
	id := fmt.Sprintf("%s/%s#%d", key.Run, key.Task, c)
	if items, ok := r.cache.chunks.get(id); ok {
		return items, nil
	}
	items, err := r.store.MapItems(ctx, key.Run, key.Task, c)
	if err != nil {
		return nil, err
	}
	r.cache.chunks.put(id, items)
	return items, nil
}

// Start starts a map task whose dependencies are met (inst, as its
// dispatch effect holds it, with the run when held): its attempt starts
// with no worker, its over is rendered and its map item created; then its
// first children go. It answers the instance as it left it and the
// effects that yields.
func (r *Room[E]) Start(ctx context.Context, inst ledger.Instance, held *ledger.Run) (ledger.Instance, []E, error) {
	res, err := r.startAttempt(ctx, inst)
	if err != nil || res.Outcome != statemodel.Applied || res.Stopped {
		// Another evaluator started it (or it moved on): nothing to do.
		return res.Instance, nil, err
	}
	more := r.k.Applied(ctx, res)
	started := res.Instance
	run := ledger.Run{}
	if held != nil {
		run = *held
	} else if run, err = r.store.GetRun(ctx, inst.Key.Run); err != nil {
		return started, more, err
	}
	rec, err := mapRecordOf(inst)
	if err != nil {
		return started, more, err
	}
	if _, err := r.store.GetMap(ctx, inst.Key.Run, inst.Key.Task); err == nil {
		// Reopened by a child's retry: its children stand; it ends when
		// they have.
		return started, append(more, r.k.MapStep(inst.Key)), nil
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return started, more, err
	}
	ended, emore, err := r.expandMap(ctx, started, run, rec)
	return ended, append(more, emore...), err
}

// startAttempt writes the next attempt of the map task inst as started
// with no worker (with its dependency verdict when it is CREATED), in
// one write.
func (r *Room[E]) startAttempt(ctx context.Context, inst ledger.Instance) (ledger.Result, error) {
	snap := inst.Snapshot
	n := snap.Attempt + 1
	_, hash, err := r.k.AttemptToken(inst, n)
	if err != nil {
		return ledger.Result{Instance: inst}, err
	}
	var evs []statemodel.Event
	if snap.State == statemodel.StateCreated {
		evs = append(evs, statemodel.Event{ID: ledger.DepsEventID(snap.Seq), Type: statemodel.EvDepsMet, Actor: statemodel.ActorScheduler})
	}
	evs = append(evs,
		statemodel.Event{ID: fmt.Sprintf("dispatch:%d", n), Type: statemodel.EvDispatched, Actor: statemodel.ActorExecutor,
			Attempt: n, TokenHash: hash, ExecutorID: "map", Executor: "map"},
		statemodel.Event{ID: fmt.Sprintf("map-start:%d", n), Type: statemodel.EvStarted, Actor: statemodel.ActorWorker,
			Attempt: n, WorkerID: "map"})
	return r.store.TransitionAll(ctx, inst, evs, r.now(), r.policy())
}

// expandMap renders a started map task's over and creates its map item:
// an over that does not render fails the map task (invalid_map); any
// other error (a read of its inputs) leaves it RUNNING with no map item,
// for the run's backstop to expand again (mapRepair).
func (r *Room[E]) expandMap(ctx context.Context, started ledger.Instance, run ledger.Run, rec mapRecord) (ledger.Instance, []E, error) {
	key := started.Key
	items, rerr := r.renderOver(ctx, started, run, rec.Map)
	if rerr != nil {
		if !errors.Is(rerr, jobspec.ErrInvalidMap) {
			return started, nil, rerr
		}
		return r.endMap(ctx, started, nil, CategoryInvalidMap, rerr.Error())
	}
	m := ledger.MapState{Run: key.Run, Task: key.Task, Total: len(items), MaxParallel: rec.MaxParallel, Tolerated: rec.ToleratedFailures,
		ExpiresAt: started.ExpiresAt}
	raw := make([][]byte, len(items))
	for i, it := range items {
		raw[i] = it
	}
	if err := r.store.CreateMap(ctx, m, raw); err != nil && !errors.Is(err, ledger.ErrConflict) {
		return started, nil, err
	}
	return started, []E{r.k.MapStep(key)}, nil
}

// renderOver renders a map's over with the run's names and the task's
// inputs.
func (r *Room[E]) renderOver(ctx context.Context, inst ledger.Instance, run ledger.Run, m jobspec.Map) ([]json.RawMessage, error) {
	v := jobspec.OverVars{Job: run.Job, Run: run.ID, Trigger: string(run.Trigger), Params: map[string]any{}, Inputs: map[string]any{}}
	if !run.LogicalTime.IsZero() {
		v.LogicalTime = protocol.FormatTime(run.LogicalTime)
		v.LogicalDate = run.LogicalTime.UTC().Format(time.DateOnly)
	}
	if len(run.Params) > 0 {
		if err := decodeNumbers(run.Params, &v.Params); err != nil {
			return nil, fmt.Errorf("%w: params: %v", jobspec.ErrInvalidMap, err)
		}
	}
	if len(inst.DependsOn) > 0 {
		outs, err := r.store.GetOutputs(ctx, inst.Key.Run, inst.DependsOn)
		if err != nil {
			return nil, err
		}
		for t, o := range outs {
			var x any
			if err := decodeNumbers(o, &x); err == nil {
				v.Inputs[t] = x
			}
		}
	}
	return m.RenderOver(v)
}

func decodeNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// Step moves a map on after a child's end (or its start): one read of
// the map item, then the release of the next children, or the map task's
// end once every child ended. Steps of one map in one process share
// rounds: a step asked for while a round runs waits for the next round,
// which one of the waiters takes for all of them; it reads after each of
// their children's writes, so children ending together cost one read, not
// one each, and no step waits longer than two rounds.
func (r *Room[E]) Step(ctx context.Context, key ledger.InstanceKey) ([]E, error) {
	round, ok := r.steps.take(key)
	if !ok {
		return nil, nil // served by another step's round
	}
	effs, err := r.mapRound(ctx, key)
	r.steps.done(key, round, err == nil)
	return effs, err
}

// mapRound is one step of a map: it reads the map item and its counts
// once. A release refused because another step moved the release mark
// is tried again from the mark it met, with the counts as read: ended
// children only grow, so the room they show is there (or less), and a
// child whose end this misses releases in its own step.
func (r *Room[E]) mapRound(ctx context.Context, key ledger.InstanceKey) ([]E, error) {
	m, err := r.store.GetMap(ctx, key.Run, key.Task)
	if err != nil {
		return nil, err
	}
	rl := &releasing[E]{r: r, key: key, m: m}
	err = ledger.Update(ctx, ledger.Rounds{Max: maxRounds}, rl.read, rl.decide, rl.write)
	if errors.Is(err, ledger.ErrUnsettled) && !rl.finished {
		// Refused every round: the steps of the children running decide
		// the rest, as after any refused release.
		return nil, nil
	}
	return rl.effs, err
}

// releasing is one round of a map's releases from try to try: a refused
// release moves m to what the refusal found, and the next try decides on
// that rather than on a new read.
type releasing[E any] struct {
	r        *Room[E]
	key      ledger.InstanceKey
	m        ledger.MapState
	effs     []E
	finished bool // the map had ended: finishMap answered
}

func (rl *releasing[E]) read(context.Context, int) (ledger.MapState, error) { return rl.m, nil }

// decide finishes an ended map, or sizes the next release.
func (rl *releasing[E]) decide(ctx context.Context, m ledger.MapState) (int, ledger.Step, error) {
	if m.Ended() {
		rl.finished = true
		effs, err := rl.r.finishMap(ctx, rl.key, m)
		rl.effs = effs
		return 0, ledger.StepDone, err
	}
	k := min(m.Free(), releaseBatch)
	if k == 0 {
		return 0, ledger.StepDone, nil
	}
	return k, ledger.StepWrite, nil
}

// write releases k children and creates them; a refusal that found the
// map released to its end, or closed by a cancel, ends the round.
func (rl *releasing[E]) write(ctx context.Context, k int) error {
	found, err := rl.r.store.ReleaseChildren(ctx, rl.m, k)
	if errors.Is(err, ledger.ErrVersionConflict) {
		if found.Next <= rl.m.Next || found.Next >= rl.m.Total {
			// Released to the end, or closed by a cancel: the steps of
			// the children running decide the rest.
			return nil
		}
		rl.m.Running += found.Next - rl.m.Next
		rl.m.Next = found.Next
		return err
	}
	if err != nil {
		return err
	}
	rl.effs, err = rl.r.createChildren(ctx, rl.key, rl.m.Next, k)
	return err
}

// stepGate runs one round of each map at a time in its Room, the one
// of a process. A step takes a ticket; a round serves every ticket taken
// before it started.
type stepGate struct {
	mu   sync.Mutex
	maps map[ledger.InstanceKey]*stepState
}

type stepState struct {
	cond          *sync.Cond
	taken, served int
	running       bool
	waiting       int
}

func newStepGate() *stepGate { return &stepGate{maps: map[ledger.InstanceKey]*stepState{}} }

// take answers true and the ticket a round is to serve when the caller is
// to run it, or false once a round started after the caller's ticket
// served it.
func (g *stepGate) take(key ledger.InstanceKey) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.maps[key]
	if st == nil {
		st = &stepState{cond: sync.NewCond(&g.mu)}
		g.maps[key] = st
	}
	st.taken++
	ticket := st.taken
	st.waiting++
	for st.running && st.served < ticket {
		st.cond.Wait()
	}
	st.waiting--
	if st.served >= ticket {
		g.forget(key, st)
		return 0, false
	}
	st.running = true
	return st.taken, true
}

// done ends the round that serves tickets up to round; one that failed
// serves none (a waiter runs the next).
func (g *stepGate) done(key ledger.InstanceKey, round int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.maps[key]
	st.running = false
	if ok {
		st.served = max(st.served, round)
	}
	st.cond.Broadcast()
	g.forget(key, st)
}

func (g *stepGate) forget(key ledger.InstanceKey, st *stepState) {
	if !st.running && st.waiting == 0 {
		delete(g.maps, key)
	}
}

// stallWatch remembers the map each running map task's last backstop
// found, by task. Bounded.
type stallWatch struct {
	mu   sync.Mutex
	seen map[ledger.InstanceKey]ledger.MapState
}

func newStallWatch() *stallWatch { return &stallWatch{seen: map[ledger.InstanceKey]ledger.MapState{}} }

// stalled reports whether m is the map the previous backstop of key
// found: no child was released and none ended since.
func (w *stallWatch) stalled(key ledger.InstanceKey, m ledger.MapState) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, ok := w.seen[key]
	if len(w.seen) >= mapCacheSize {
		clear(w.seen)
	}
	w.seen[key] = m
	return ok && prev == m
}

// createChildren writes released children from..from+k-1 and returns
// their dispatches.
func (r *Room[E]) createChildren(ctx context.Context, key ledger.InstanceKey, from, k int) ([]E, error) {
	idx := make([]int, k)
	for j := range idx {
		idx[j] = from + j
	}
	children, p, err := r.newChildren(ctx, key, idx)
	if err != nil {
		return nil, err
	}
	if err := r.store.CreateChildren(ctx, children); err != nil {
		return nil, err
	}
	run := p.run
	effs := make([]E, len(children))
	for i, c := range children {
		effs[i] = r.k.Dispatch(c, &run)
	}
	return effs, nil
}

// newChildren builds the instances of the children idx of the map task
// key (SCHEDULED, with their elements), writing nothing.
func (r *Room[E]) newChildren(ctx context.Context, key ledger.InstanceKey, idx []int) ([]ledger.Instance, mapParent, error) {
	p, err := r.mapParentOf(ctx, key)
	if err != nil {
		return nil, p, err
	}
	policy := p.inst.Policy
	policy.Timeouts.Heartbeat, policy.Timeouts.Cancel = p.rec.Heartbeat, p.rec.Cancel
	nr := ledger.NewRun{ID: key.Run, Job: p.inst.Job}
	now := r.now()
	children := make([]ledger.Instance, 0, len(idx))
	for _, i := range idx {
		items, err := r.mapItems(ctx, key, i/ledger.MapItemsPerChunk)
		if err != nil {
			return nil, p, err
		}
		secret, err := r.k.NewSecret()
		if err != nil {
			return nil, p, err
		}
		child, err := ledger.NewInstance(nr, ledger.NewTask{
			ID: ledger.ChildTask(key.Task, i), Pool: p.inst.Pool, Payload: p.inst.Payload, Executor: p.inst.Executor,
			Policy: policy, Scheduled: true, Secret: secret, Item: items[i%ledger.MapItemsPerChunk],
			TriggerRule: statemodel.TriggerRule("").Effective(),
		}, now)
		if err != nil {
			return nil, p, err
		}
		child.ExpiresAt = p.inst.ExpiresAt // its run's, as every item of the run
		children = append(children, child)
	}
	return children, p, nil
}

// finishMap ends a map task whose children all ended: its output (the
// children's outputs, in index order) is kept, then its attempt ends,
// conditioned on its state: it ends once.
func (r *Room[E]) finishMap(ctx context.Context, key ledger.InstanceKey, m ledger.MapState) ([]E, error) {
	inst, err := r.store.GetInstance(ctx, key)
	if err != nil {
		return nil, err
	}
	if st := inst.Snapshot.State; st != statemodel.StateRunning && st != statemodel.StateCancelling {
		return nil, nil
	}
	if !m.Succeeds() || inst.Snapshot.State == statemodel.StateCancelling {
		_, more, err := r.endMap(ctx, inst, nil, CategoryChildrenFailed,
			fmt.Sprintf("%d of %d children ended other than SUCCEEDED (%d tolerated)", m.Total-m.Succeeded, m.Total, m.Tolerated))
		return more, err
	}
	out, truncated, err := r.childrenOutput(ctx, key)
	if err != nil {
		return nil, err
	}
	if err := r.store.SetMapOutput(ctx, key.Run, key.Task, out, truncated); err != nil {
		return nil, err
	}
	_, more, err := r.endMap(ctx, inst, out, "", "")
	return more, err
}

// childrenOutput builds the array of the children's outputs (null for one
// without); nil and truncated beyond ledger.MaxMapOutputBytes.
func (r *Room[E]) childrenOutput(ctx context.Context, key ledger.InstanceKey) ([]byte, bool, error) {
	var b bytes.Buffer
	b.WriteByte('[')
	token := ""
	first := true
	for {
		page, next, err := r.store.ListChildren(ctx, key.Run, key.Task, 1000, token)
		if err != nil {
			return nil, false, err
		}
		for _, c := range page {
			if !first {
				b.WriteByte(',')
			}
			first = false
			if o := ledger.SucceededOutput(c.Snapshot); o != nil {
				b.Write(o)
			} else {
				b.WriteString("null")
			}
			if b.Len() > ledger.MaxMapOutputBytes {
				return nil, true, nil
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	b.WriteByte(']')
	if b.Len() > ledger.MaxMapOutputBytes {
		return nil, true, nil
	}
	return b.Bytes(), false, nil
}

// endMap ends a map task's attempt: succeeded with out when category is
// empty, else failed (not retried) with category and reason; a map task
// whose cancel was requested acknowledges it.
func (r *Room[E]) endMap(ctx context.Context, inst ledger.Instance, out []byte, category, reason string) (ledger.Instance, []E, error) {
	n := inst.Snapshot.Attempt
	ev := statemodel.Event{ID: fmt.Sprintf("map-end:%d", n), Actor: statemodel.ActorWorker, Attempt: n, Reason: reason}
	switch {
	case inst.Snapshot.State == statemodel.StateCancelling:
		ev.Type, ev.ErrorCategory = statemodel.EvCancelled, statemodel.CategoryCancelled
	case category == "":
		ev.Type, ev.Output = statemodel.EvSucceeded, out
		if len(out) > protocol.MaxOutputBytes {
			ev.Output = nil // kept in the map's output item, not twice in the instance
		}
	default:
		ev.Type, ev.ErrorCategory, ev.Retryable = statemodel.EvFailed, category, new(bool)
	}
	res, err := r.store.TransitionFrom(ctx, inst, ev, r.now(), r.policy())
	if err != nil {
		return inst, nil, err
	}
	if res.Outcome != statemodel.Applied {
		return res.Instance, nil, nil
	}
	return res.Instance, r.k.Applied(ctx, res), nil
}

// Output reads a map task's output: ErrNotFound before it ended.
func (r *Room[E]) Output(ctx context.Context, run, task string) ([]byte, bool, error) {
	return r.store.GetMapOutput(ctx, run, task)
}

// Children pages a map task's children in index order; ledger.ErrNotFound when
// the run has no such task.
func (r *Room[E]) Children(ctx context.Context, run, task string, limit int, token string) ([]ledger.Instance, string, error) {
	if _, err := r.store.GetInstance(ctx, ledger.InstanceKey{Run: run, Task: task}); err != nil {
		return nil, "", err
	}
	return r.store.ListChildren(ctx, run, task, limit, token)
}

// Cancel stops a map task whose cancel was requested: its pending
// children are counted cancelled and never released (one conditional
// write of the map item), its released children that did not end get a
// cancel request, and once all ended the map task acknowledges its
// cancel (finishMap).
func (r *Room[E]) Cancel(ctx context.Context, key ledger.InstanceKey) ([]E, error) {
	var m ledger.MapState
	expanded := true
	err := ledger.Update(ctx, ledger.Rounds{Max: maxRounds + 1},
		func(ctx context.Context, _ int) (ledger.MapState, error) {
			cur, err := r.store.GetMap(ctx, key.Run, key.Task)
			if errors.Is(err, ledger.ErrNotFound) {
				expanded = false
				return cur, nil
			}
			return cur, err
		},
		func(_ context.Context, cur ledger.MapState) (ledger.MapState, ledger.Step, error) {
			if !expanded {
				return cur, ledger.StepDone, nil // not expanded: nothing runs
			}
			return cur, ledger.StepWrite, nil
		},
		func(ctx context.Context, cur ledger.MapState) (err error) {
			m, err = r.store.CloseMap(ctx, cur)
			return err
		})
	if err != nil || !expanded {
		return nil, err
	}
	token := ""
	for {
		page, next, err := r.store.ListChildren(ctx, key.Run, key.Task, 1000, token)
		if err != nil {
			return nil, err
		}
		for _, c := range page {
			st := c.Snapshot.State
			if st.Terminal() || st == statemodel.StateCancelling {
				continue
			}
			ev := statemodel.Event{ID: "map-cancel:" + key.Task, Type: statemodel.EvCancelRequested, Actor: statemodel.ActorOperator, Reason: "its map task was cancelled"}
			res, err := r.store.TransitionFrom(ctx, c, ev, r.now(), r.policy())
			if err != nil {
				r.log.WarnContext(ctx, "cancel map child", "run_id", key.Run, "task", c.Key.Task, "error", err.Error())
				continue
			}
			r.k.Follow(ctx, res)
		}
		if next == "" {
			break
		}
		token = next
	}
	if m.Ended() {
		return r.finishMap(ctx, key, m)
	}
	return nil, nil
}

// Reopen gives a map task that ended a new attempt when an operator
// retried one of its children (key): it runs again until its children
// have ended, and is decided from their counts then. A SUCCEEDED map task
// (its failures tolerated) is first marked failed by the operator, in the
// same write as its retry, so it is never seen FAILED.
func (r *Room[E]) Reopen(ctx context.Context, key ledger.InstanceKey, retry statemodel.Event) error {
	parent, ok := ParentKey(key)
	if !ok {
		return nil
	}
	inst, err := r.store.GetInstance(ctx, parent)
	if err != nil {
		return err
	}
	retry.ID = ""
	retry.Reason = fmt.Sprintf("child %s retried: %s", key.Task, retry.Reason)
	switch inst.Snapshot.State {
	case statemodel.StateFailed, statemodel.StateCancelled:
		return r.k.Operate(ctx, parent, retry)
	case statemodel.StateSucceeded:
		return r.reopenSucceededMap(ctx, inst, retry)
	}
	return nil
}

// reopenSucceededMap is Reopen for a SUCCEEDED map task: override.failed
// and operator.retry in one write, then the run is derived again as for
// any retry.
func (r *Room[E]) reopenSucceededMap(ctx context.Context, inst ledger.Instance, retry statemodel.Event) error {
	retry.Actor = statemodel.ActorOperator
	if retry.Operator == "" {
		retry.Operator = "runledger"
	}
	retry.ID = "op:" + r.k.NewID()
	over := statemodel.Event{ID: "op:" + r.k.NewID(), Type: statemodel.EvOverrideFailed, Actor: statemodel.ActorOperator,
		Operator: retry.Operator, Reason: retry.Reason}
	res, err := r.store.TransitionAll(ctx, inst, []statemodel.Event{over, retry}, r.now(), r.policy())
	if err != nil {
		return err
	}
	if res.Outcome != statemodel.Applied || res.Stopped {
		return nil // it moved on meanwhile: whoever moved it decides
	}
	r.k.Follow(ctx, res)
	return r.k.AdvanceRun(ctx, inst.Key.Run, true)
}
