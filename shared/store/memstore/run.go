package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// CreateRun creates a run, its instances in CREATED and their creation
// records, all or nothing, refusing what the DynamoDB store refuses before
// any write. A taken idempotency key is answered before a taken slot, and
// both before a run id that exists, as the DynamoDB store answers.
func (s *runs) CreateRun(ctx context.Context, nr ledger.NewRun, now time.Time) (ledger.RunView, error) {
	op := opError("create run %s of job %s", nr.ID, nr.Job)
	nodes, err := checkNewRun(nr)
	if err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.RunView{}, op(err)
	}
	defer s.mu.Unlock()
	if _, ok := s.jobs[nr.Job]; nr.OfLiveJob && !ok {
		return ledger.RunView{}, op(fmt.Errorf("%w: job %s does not exist or is being deleted", ledger.ErrNotFound, nr.Job))
	}
	stamp := s.clock()
	released, err := s.releasable(nr)
	if err != nil {
		return ledger.RunView{}, op(err)
	}
	if err := s.claimable(nr, stamp); err != nil {
		return ledger.RunView{}, op(err)
	}
	run := ledger.NewRunRecord(nr, nodes, now, stamp, s.backstop)
	ledger.Retain(&run, nr, s.retention, stamp)
	created := make([]*instance, len(nr.Tasks))
	for i, t := range nr.Tasks {
		in, err := newInstance(nr, t, now)
		if err != nil {
			return ledger.RunView{}, op(err)
		}
		in.inst.TimerAt, in.inst.TimerKind = ledger.IndexedTimer(in.inst.Key, in.inst.Snapshot, now, s.horizon)
		in.inst.ExpiresAt = run.ExpiresAt
		created[i] = in
	}

	// Nothing was refused: write it all.
	view := ledger.RunView{Run: cloneRun(run)}
	s.runs[run.ID] = run
	s.runsOfJob[run.Job] = append(s.runsOfJob[run.Job], run.ID)
	var ids []string
	for _, in := range created {
		s.instances[in.inst.Key] = in
		ids = append(ids, in.inst.Key.Task)
		view.Tasks = append(view.Tasks, ledger.TaskView{Instance: cloneInstance(in.inst)})
	}
	slices.Sort(ids)
	s.tasks[run.ID] = ids
	slices.SortFunc(view.Tasks, func(a, b ledger.TaskView) int { return strings.Compare(a.Instance.Key.Task, b.Instance.Key.Task) })
	if nr.ClaimSlot {
		s.slots[slotKey(nr.Job, nr.LogicalTime)] = nr.ID
	}
	if _, taken := s.slots[slotKey(nr.Job, nr.LogicalTime)]; nr.MarkSlot && !taken {
		s.slots[slotKey(nr.Job, nr.LogicalTime)] = nr.ID
	}
	if nr.Release != nil {
		next := ledger.NextBackfill(released, stamp, s.backstop)
		s.backfills[next.ID] = cloneBackfill(next)
	}
	if ik := nr.Idempotency; ik != nil {
		s.idem[claimKey{nr.Job, ik.Key}] = idemClaim{run: nr.ID, bodyHash: ik.BodyHash, expires: stamp.Add(ledger.IdempotencyTTL)}
	}
	return view, nil
}

// checkNewRun refuses a run no store may create (ledger.CheckNewRun) and
// one whose bytes cannot fit in its items or its transaction, and returns
// its tasks as the DAG rules see them.
func checkNewRun(nr ledger.NewRun) ([]statemodel.TaskNode, error) {
	nodes, _, err := ledger.CheckNewRun(nr)
	if err != nil {
		return nil, err
	}
	total := len(nr.Params) + len(nr.Spec)
	if err := tooLarge("run "+nr.ID, total, ledger.MaxItemSize); err != nil {
		return nil, err
	}
	for _, t := range nr.Tasks {
		if err := tooLarge("instance "+nr.ID+"/"+t.ID, len(t.Payload), ledger.MaxItemSize); err != nil {
			return nil, err
		}
		total += len(t.Payload)
	}
	if err := tooLarge("transaction", total, ledger.MaxTransactionSize); err != nil {
		return nil, err
	}
	return nodes, nil
}

// releasable answers the backfill a run's release leaves, or
// ErrVersionConflict when the backfill held is not the one stored, as the
// DynamoDB store's condition does before any other.
func (s *runs) releasable(nr ledger.NewRun) (ledger.Backfill, error) {
	if nr.Release == nil {
		return ledger.Backfill{}, nil
	}
	if cur, ok := s.backfills[nr.Release.ID]; !ok || cur.Version != nr.Release.Version {
		return ledger.Backfill{}, fmt.Errorf("%w: backfill %s changed since version %d", ledger.ErrVersionConflict, nr.Release.ID, nr.Release.Version)
	}
	return ledger.CheckRelease(nr)
}

// claimable refuses a run whose idempotency key, slot or id is taken.
func (s *runs) claimable(nr ledger.NewRun, stamp time.Time) error {
	if ik := nr.Idempotency; ik != nil {
		// An expired key is free again (the DynamoDB store compares epoch
		// seconds, as TTL does).
		if c, ok := s.idem[claimKey{nr.Job, ik.Key}]; ok && c.expires.Unix() >= stamp.Unix() {
			ex := &ledger.ExistingRunError{Job: nr.Job, RunID: c.run, BodyHash: c.bodyHash, Err: ledger.ErrIdempotentReplay}
			if c.bodyHash != ik.BodyHash {
				ex.Err = ledger.ErrIdempotencyMismatch
			}
			return ex
		}
	}
	if nr.ClaimSlot {
		if run, ok := s.slots[claimKey{nr.Job, nr.LogicalTime.UTC().Format(time.RFC3339Nano)}]; ok {
			return &ledger.ExistingRunError{Job: nr.Job, RunID: run, Err: ledger.ErrSlotTaken}
		}
	}
	if _, ok := s.runs[nr.ID]; ok {
		return fmt.Errorf("%w: run %s", ledger.ErrAlreadyExists, nr.ID)
	}
	return nil
}

// newInstance is task t of run nr as ledger.NewInstance creates it, its
// records kept in the instance's history.
func newInstance(nr ledger.NewRun, t ledger.NewTask, now time.Time) (*instance, error) {
	inst, err := ledger.NewInstance(nr, t, now)
	if err != nil {
		return nil, err
	}
	hist := inst.History
	inst.History = nil // kept whole in the instance's history
	in := &instance{inst: inst, guards: map[string]statemodel.SeenEvent{}, attempts: map[int]*ledger.Attempt{}}
	for _, tr := range hist {
		in.history = append(in.history, cloneTransition(tr))
		in.guards[tr.EventID] = statemodel.SeenEvent{ID: tr.EventID, Seq: tr.Seq, To: tr.To}
	}
	return in, nil
}

// GetRun reads a run.
func (s *runs) GetRun(ctx context.Context, id string) (ledger.Run, error) {
	op := opError("get run %s", id)
	if err := s.enter(ctx, ledger.CheckRunID(id)); err != nil {
		return ledger.Run{}, op(err)
	}
	defer s.mu.Unlock()
	run, ok := s.live(id)
	if !ok {
		return ledger.Run{}, op(ledger.ErrNotFound)
	}
	return cloneRun(run), nil
}

// ReadRun reads a whole run: the run, its instances by task id, and each
// instance's attempts by number.
func (s *runs) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	op := opError("read run %s", id)
	if err := s.enter(ctx, ledger.CheckRunID(id)); err != nil {
		return ledger.RunView{}, op(err)
	}
	defer s.mu.Unlock()
	run, ok := s.live(id)
	if !ok {
		return ledger.RunView{}, op(ledger.ErrNotFound)
	}
	view := ledger.RunView{Run: cloneRun(run)}
	for _, task := range s.tasks[id] {
		in := s.instances[ledger.InstanceKey{Run: id, Task: task}]
		tv := ledger.TaskView{Instance: cloneInstance(in.inst)}
		for _, n := range slices.Sorted(maps.Keys(in.attempts)) {
			tv.Attempts = append(tv.Attempts, cloneAttempt(*in.attempts[n]))
		}
		view.Tasks = append(view.Tasks, tv)
		if m, ok := s.mapOf(id, task); ok {
			if view.Maps == nil {
				view.Maps = map[string]ledger.MapState{}
			}
			view.Maps[task] = m.state
		}
	}
	view.Run = ledger.ShownRun(view.Run, view.Nodes())
	return view, nil
}

// nodes are run id's tasks as the DAG rules see them. The caller holds
// the lock.
func (s *runs) nodes(id string) []statemodel.TaskNode {
	var out []statemodel.TaskNode
	for _, task := range s.tasks[id] {
		out = append(out, s.instances[ledger.InstanceKey{Run: id, Task: task}].inst.Node())
	}
	return out
}

// ListRuns lists runs newest first (run ids are ULIDs), of one job or of
// all, filtered by status as shown (ledger.ShownRun).
func (s *runs) ListRuns(ctx context.Context, f ledger.RunFilter) ([]ledger.Run, string, error) {
	op := opError("list runs (job %q, status %q)", f.Job, f.Status)
	listing := "runs"
	if f.Job != "" {
		if err := ledger.CheckJobName(f.Job); err != nil {
			return nil, "", op(err)
		}
		listing = "runs of job " + f.Job
	}
	after, err := decodeToken(f.Token, listing)
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	var runs []ledger.Run
	now := s.clock()
	for id, run := range s.runs {
		if ledger.Expired(run.ExpiresAt, now) {
			continue // gone, as the DynamoDB store's reads treat it
		}
		run = ledger.ShownRun(run, s.nodes(id))
		if (f.Job == "" || run.Job == f.Job) && (f.Status == "" || run.Status == f.Status) {
			runs = append(runs, run)
		}
	}
	slices.SortFunc(runs, func(a, b ledger.Run) int { return strings.Compare(b.ID, a.ID) })
	got, next := page(runs, func(r ledger.Run) string { return r.ID }, descending, listing, after, listLimit(f.Limit))
	out := make([]ledger.Run, len(got))
	for i, r := range got {
		out[i] = cloneRun(r)
	}
	return out, next, nil
}

// UpdateRunState stores a run's derived state with a compare-and-set on
// run.Version.
func (s *runs) UpdateRunState(ctx context.Context, run ledger.Run, u ledger.RunUpdate) (ledger.Run, error) {
	op := opError("update run %s from version %d", run.ID, run.Version)
	next, err := ledger.NextRun(run, u, s.clock(), s.backstop)
	if err != nil {
		return ledger.Run{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Run{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.runs[run.ID]
	switch {
	case !ok:
		return ledger.Run{}, op(ledger.ErrNotFound)
	case cur.Version != run.Version:
		return ledger.Run{}, op(fmt.Errorf("%w: stored version is %d", ledger.ErrVersionConflict, cur.Version))
	case cur.Job != run.Job:
		return ledger.Run{}, op(fmt.Errorf("%w: run pointer under job %s", ledger.ErrNotFound, run.Job))
	}
	// Only the derived fields change; the rest stays as stored.
	cur.ExecutionState, cur.PublicationState, cur.Status = next.ExecutionState, next.PublicationState, next.Status
	cur.Version, cur.EndedAt, cur.TimerAt = next.Version, next.EndedAt, next.TimerAt
	if next.ExecutionState.Terminal() && !run.ExecutionState.Terminal() {
		// The run ends: it is kept at least its retention from now.
		cur = s.retained(cur, s.clock())
		next.ExpiresAt = cur.ExpiresAt
	}
	s.runs[run.ID] = cur
	return cloneRun(next), nil
}

// RearmRunBackstop moves a live run's backstop to the clock + the run
// backstop when the stored version and execution state are still run's.
func (s *runs) RearmRunBackstop(ctx context.Context, run ledger.Run) (ledger.Run, error) {
	op := opError("re-arm backstop of run %s", run.ID)
	if err := ledger.CheckRunID(run.ID); err != nil {
		return ledger.Run{}, op(err)
	}
	if run.ExecutionState.Terminal() {
		return ledger.Run{}, op(fmt.Errorf("%w: a %s run has no backstop", ledger.ErrInvalidInput, run.ExecutionState))
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Run{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.runs[run.ID]
	switch {
	case !ok:
		return ledger.Run{}, op(ledger.ErrNotFound)
	case cur.Version != run.Version || cur.ExecutionState != run.ExecutionState:
		return ledger.Run{}, op(ledger.ErrVersionConflict)
	}
	now := s.clock()
	next := run
	next.TimerAt = ledger.RunTimer(run, now, s.backstop)
	cur.TimerAt = next.TimerAt
	cur = s.retained(cur, now)
	next.ExpiresAt = cur.ExpiresAt
	s.runs[run.ID] = cur
	return cloneRun(next), nil
}

// MarkDeadlineMissed records that run was found unfinished at its
// deadline: false when recorded already or the run finished first.
func (s *runs) MarkDeadlineMissed(ctx context.Context, run ledger.Run) (ledger.Run, bool, error) {
	op := opError("mark deadline of run %s missed", run.ID)
	if err := ledger.CheckRunID(run.ID); err != nil {
		return ledger.Run{}, false, op(err)
	}
	if run.DeadlineAt.IsZero() {
		return ledger.Run{}, false, op(fmt.Errorf("%w: the run has no deadline", ledger.ErrInvalidInput))
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Run{}, false, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.runs[run.ID]
	switch {
	case !ok:
		return ledger.Run{}, false, op(ledger.ErrNotFound)
	case !cur.DeadlineMissedAt.IsZero() || cur.ExecutionState.Terminal():
		return ledger.Run{}, false, nil
	}
	next := ledger.DeadlineMissed(cur, s.clock(), s.backstop)
	cur.DeadlineMissedAt, cur.TimerAt = next.DeadlineMissedAt, next.TimerAt
	s.runs[run.ID] = cur
	return cloneRun(cur), true, nil
}

// ListUnfinishedRuns lists a job's unfinished runs, oldest first.
func (s *runs) ListUnfinishedRuns(ctx context.Context, job string) ([]ledger.UnfinishedRun, error) {
	op := opError("list unfinished runs of job %s", job)
	if err := s.enter(ctx, ledger.CheckJobName(job)); err != nil {
		return nil, op(err)
	}
	defer s.mu.Unlock()
	return s.unfinished(job), nil
}

// unfinished lists job's unfinished runs, oldest first; the caller holds
// the lock.
func (s *mem) unfinished(job string) []ledger.UnfinishedRun {
	var out []ledger.UnfinishedRun
	for _, id := range slices.Sorted(slices.Values(s.runsOfJob[job])) {
		if run := s.runs[id]; !run.ExecutionState.Terminal() {
			out = append(out, ledger.UnfinishedRun{ID: id, LogicalTime: run.LogicalTime, Trigger: run.Trigger})
		}
	}
	return out
}

// HasUnfinishedRuns reports whether job has a run that has not ended,
// runs of the ignored triggers left out.
func (s *runs) HasUnfinishedRuns(ctx context.Context, job string, ignore ...statemodel.Trigger) (bool, error) {
	op := opError("unfinished runs of job %s", job)
	if err := s.enter(ctx, ledger.CheckJobName(job)); err != nil {
		return false, op(err)
	}
	defer s.mu.Unlock()
	for _, r := range s.unfinished(job) {
		if !slices.Contains(ignore, r.Trigger) {
			return true, nil
		}
	}
	return false, nil
}

// live is run id unless it is absent or expired: an expired run is gone
// to every reader, as in the DynamoDB store (which deletes it some time
// after). Called under the lock.
func (m *mem) live(id string) (ledger.Run, bool) {
	run, ok := m.runs[id]
	if !ok || ledger.Expired(run.ExpiresAt, m.clock()) {
		return ledger.Run{}, false
	}
	return run, true
}

// retained is run with its expiry pushed when due at now
// (ledger.ExpiryDue), and every instance of the run (map children
// included) with the same expiry, as the DynamoDB store pushes every item
// of the run. Called under the lock.
func (m *mem) retained(run ledger.Run, now time.Time) ledger.Run {
	if !ledger.ExpiryDue(run, now) {
		return run
	}
	run.ExpiresAt = ledger.RunExpiry(now, run.Retention)
	for key, in := range m.instances {
		if key.Run == run.ID {
			in.inst.ExpiresAt = run.ExpiresAt
		}
	}
	for key, mm := range m.maps {
		if key.Run == run.ID {
			mm.state.ExpiresAt = run.ExpiresAt
		}
	}
	return run
}
