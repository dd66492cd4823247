package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

type outcome struct {
	res ledger.Result
	err error
}

var transitionCases = []Case{
	{"ClaimRace", claimRace},
	{"SameEventConcurrently", sameEventConcurrently},
	{"LateSuccessFromOlderAttempt", lateSuccessFromOlderAttempt},
	{"LateEventsCapped", lateEventsCapped},
	{"OldDuplicateAnsweredWithFirstOutcome", oldDuplicate},
	{"LeaseExpiryAfterHeartbeatNotDue", leaseExpiryAfterHeartbeat},
	{"AttemptsBeyondTheSnapshotStayReadable", attemptsBeyondTheSnapshot},
	{"StoredPolicy", storedPolicy},
	{"TransitionErrors", transitionErrors},
	{"HistoryPages", historyPages},
}

// ClaimRounds and ClaimWorkers size the claim race: 16 workers claim the
// same QUEUED attempt at once, 20 times over.
const ClaimRounds, ClaimWorkers = 20, 16

// claimRace: exactly one claim is applied each round; the other 15 are
// rejected because the attempt is already claimed by another worker.
func claimRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	won := 0
	for round := range ClaimRounds {
		v := h.MustCreate(t, NewRun("claims", "main"))
		key := v.Tasks[0].Instance.Key
		now := h.ToQueued(t, key)
		events := make([]statemodel.Event, ClaimWorkers)
		for i := range events {
			events[i] = Started(1, fmt.Sprintf("worker-%d", i))
		}
		got := Race(ClaimWorkers, func(i int) outcome {
			res, err := h.Store.Transition(ctx, key, events[i], now, Policy())
			return outcome{res, err}
		})
		applied, rejected, winner := 0, 0, -1
		for i, o := range got {
			switch o.res.Outcome {
			case statemodel.Applied:
				if o.err != nil {
					t.Fatalf("round %d worker %d: applied with error %v", round, i, o.err)
				}
				applied++
				winner = i
			case statemodel.Rejected:
				// A lost claim meets RUNNING, where attempt.started has no
				// row; the attempt as found names the winner.
				if !errors.Is(o.err, statemodel.ErrIllegalTransition) && !errors.Is(o.err, statemodel.ErrGuard) {
					t.Errorf("round %d worker %d: rejected with %v, want illegal transition or guard", round, i, o.err)
				}
				cur, _ := o.res.Snapshot.Current()
				if !cur.Claimed() || cur.WorkerID == events[i].WorkerID {
					t.Errorf("round %d worker %d: rejected but attempt %+v is not claimed by another worker", round, i, cur)
				}
				rejected++
			default:
				t.Errorf("round %d worker %d: outcome %s (err %v)", round, i, o.res.Outcome, o.err)
			}
		}
		if applied != 1 || rejected != ClaimWorkers-1 {
			t.Fatalf("round %d: %d applied, %d rejected; want 1 and %d", round, applied, rejected, ClaimWorkers-1)
		}
		inst := h.MustInstance(t, key)
		cur, _ := inst.Snapshot.Current()
		if inst.Snapshot.State != statemodel.StateRunning || cur.WorkerID != events[winner].WorkerID || cur.ClaimEventID != events[winner].ID {
			t.Fatalf("round %d: stored %s attempt %+v, want RUNNING claimed by %s", round, inst.Snapshot.State, cur, events[winner].WorkerID)
		}
		if n := len(h.FullHistory(t, key)); n != 4 {
			t.Fatalf("round %d: %d history records, want 4 (created, deps met, dispatched, started)", round, n)
		}
		won++
	}
	if won != ClaimRounds {
		t.Fatalf("claim race settled %d/%d times", won, ClaimRounds)
	}
	t.Logf("claim race: %d/%d rounds with exactly one winner among %d workers", won, ClaimRounds, ClaimWorkers)
}

// sameEventConcurrently: one worker event delivered by 16 goroutines at
// once gives exactly one transition record and 15 duplicates that carry
// the first outcome and the state that stands after the race.
func sameEventConcurrently(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("dups", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	done := Succeeded(1)
	before := len(h.FullHistory(t, key))

	got := Race(16, func(int) outcome {
		res, err := h.Store.Transition(ctx, key, done, now.Add(time.Second), Policy())
		return outcome{res, err}
	})
	applied, dups := 0, 0
	var first statemodel.SeenEvent
	for i, o := range got {
		if o.err != nil {
			t.Fatalf("delivery %d: %v", i, o.err)
		}
		switch o.res.Outcome {
		case statemodel.Applied:
			applied++
			first = statemodel.SeenEvent{ID: done.ID, Seq: o.res.Transition.Seq, To: o.res.Transition.To}
		case statemodel.Duplicate:
			dups++
		default:
			t.Fatalf("delivery %d: outcome %s", i, o.res.Outcome)
		}
	}
	if applied != 1 || dups != 15 {
		t.Fatalf("%d applied, %d duplicates; want 1 and 15", applied, dups)
	}
	for i, o := range got {
		if o.res.Outcome != statemodel.Duplicate {
			continue
		}
		if o.res.First != first {
			t.Errorf("delivery %d: first outcome %+v, want %+v", i, o.res.First, first)
		}
		if o.res.Snapshot.State != statemodel.StateSucceeded {
			t.Errorf("delivery %d: duplicate answers state %s, want %s", i, o.res.Snapshot.State, statemodel.StateSucceeded)
		}
	}
	hist := h.FullHistory(t, key)
	n := 0
	for _, tr := range hist {
		if tr.EventID == done.ID {
			n++
		}
	}
	if n != 1 || len(hist) != before+1 {
		t.Fatalf("%d records of the event, %d records in all (was %d); want 1 and %d", n, len(hist), before, before+1)
	}
}

// toAttempt2Running loses attempt 1 (lease expiry, evidence window), retries
// and claims attempt 2; it returns the time it reached.
func toAttempt2Running(t *testing.T, h *Harness, key ledger.InstanceKey) time.Time {
	t.Helper()
	p := Policy()
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w1"), now)
	now = h.Clock.Advance(p.Timeouts.Heartbeat + time.Second)
	h.Step(t, key, Ev(statemodel.EvLeaseExpired, 1), now)
	now = h.Clock.Advance(p.EvidenceWindow + time.Second)
	h.Step(t, key, Ev(statemodel.EvWindowExpired, 1), now)
	now = h.Clock.Advance(p.Retry.MaxInterval)
	h.Step(t, key, Ev(statemodel.EvRetryDue, 0), now)
	h.Step(t, key, Dispatch(2), now)
	h.Step(t, key, Started(2, "w2"), now)
	return now
}

// lateSuccessFromOlderAttempt: attempt 1's success after attempt 2 started
// is Stale, recorded on attempt 1 once however often it is delivered, and
// the instance does not change.
func lateSuccessFromOlderAttempt(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("late", "main"))
	key := v.Tasks[0].Instance.Key
	now := toAttempt2Running(t, h, key)
	before := h.MustInstance(t, key)
	late := Ev(statemodel.EvSucceeded, 1)
	late.EventTime = now.Add(-time.Minute)
	for delivery := range 3 {
		res, err := h.Store.Transition(ctx, key, late, now.Add(time.Second), Policy())
		if err != nil || res.Outcome != statemodel.Stale {
			t.Fatalf("delivery %d: outcome %s, err %v; want stale", delivery, res.Outcome, err)
		}
		if res.Late == nil || res.Late.Attempt != 1 || res.Late.Outcome != statemodel.OutcomeSucceeded {
			t.Fatalf("delivery %d: late event %+v", delivery, res.Late)
		}
	}
	after := h.MustInstance(t, key)
	if after.Snapshot.Version != before.Snapshot.Version || after.Snapshot.State != statemodel.StateRunning ||
		!after.Snapshot.EqualState(before.Snapshot) || after.Snapshot.Attempt != 2 {
		t.Fatalf("instance changed: before %+v, after %+v", before.Snapshot, after.Snapshot)
	}
	view, err := h.Store.ReadRun(ctx, key.Run)
	if err != nil {
		t.Fatal(err)
	}
	atts := view.Tasks[0].Attempts
	if len(atts) != 2 {
		t.Fatalf("%d attempts read with the run, want 2", len(atts))
	}
	if len(atts[0].Late) != 1 || atts[0].Late[0].EventID != late.ID || !atts[0].Late[0].EventTime.Equal(late.EventTime) {
		t.Fatalf("attempt 1 late events %+v, want exactly the late success", atts[0].Late)
	}
	if atts[0].Outcome != statemodel.OutcomeLost || atts[0].WorkerID != "w1" {
		t.Fatalf("attempt 1 record %+v lost its own history", atts[0].AttemptRecord)
	}
	if len(atts[1].Late) != 0 || atts[1].WorkerID != "w2" || !atts[1].Outcome.Undecided() {
		t.Fatalf("attempt 2 %+v", atts[1])
	}
}

// lateEventsCapped: an attempt keeps its first ledger.MaxLateEvents late
// events and counts the deliveries of later ones, so no flood of stale
// reports grows it; a kept event delivered again is kept once.
func lateEventsCapped(t *testing.T, h *Harness) {
	ctx := context.Background()
	p := Policy()
	v := h.MustCreate(t, NewRun("late-cap", "main"))
	key := v.Tasks[0].Instance.Key
	h.ToQueued(t, key)
	now := h.Clock.Advance(p.Timeouts.Queue)
	h.Step(t, key, Ev(statemodel.EvQueueTimeout, 1), now)
	now = h.Clock.Advance(p.Retry.MaxInterval)
	h.Step(t, key, Ev(statemodel.EvRetryDue, 0), now)
	h.Step(t, key, Dispatch(2), now)

	const sent = ledger.MaxLateEvents + 4
	var first statemodel.Event
	for i := range sent {
		late := Ev(statemodel.EvSucceeded, 1)
		if i == 0 {
			first = late
		}
		res, err := h.Store.Transition(ctx, key, late, now, p)
		if err != nil || res.Outcome != statemodel.Stale {
			t.Fatalf("late event %d: %s, %v", i, res.Outcome, err)
		}
	}
	if res, err := h.Store.Transition(ctx, key, first, now, p); err != nil || res.Outcome != statemodel.Stale {
		t.Fatalf("a kept late event again: %s, %v", res.Outcome, err)
	}
	a, err := h.Store.GetAttempt(ctx, key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Late) != ledger.MaxLateEvents || a.LateDropped != sent-ledger.MaxLateEvents || a.Late[0].EventID != first.ID {
		t.Fatalf("attempt 1 keeps %d late events and counts %d dropped; want %d (first %s) and %d",
			len(a.Late), a.LateDropped, ledger.MaxLateEvents, first.ID, sent-ledger.MaxLateEvents)
	}
}

// oldDuplicate: an event applied more transitions ago than the snapshot
// remembers (statemodel.RecentEvents) is still a duplicate answered with
// its first outcome, whether statemodel alone would apply it again or
// reject it.
func oldDuplicate(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("old-dups", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.Clock.Now()
	firstPause := Ev(statemodel.EvPause, 0)
	firstPause.Operator, firstPause.Reason = "ops", "hold"
	pauseRes := h.Step(t, key, firstPause, now)
	firstResume := Ev(statemodel.EvResume, 0)
	h.Step(t, key, firstResume, now)
	for range statemodel.RecentEvents / 2 {
		h.Step(t, key, Ev(statemodel.EvPause, 0), now)
		h.Step(t, key, Ev(statemodel.EvResume, 0), now)
	}
	inst := h.MustInstance(t, key)
	if _, ok := inst.Snapshot.Seen(firstPause.ID); ok {
		t.Fatal("the snapshot still remembers the first pause; the case needs more transitions")
	}
	// CREATED + pause has a row: statemodel alone would apply it again.
	res, err := h.Store.Transition(ctx, key, firstPause, now, Policy())
	if err != nil || res.Outcome != statemodel.Duplicate || res.First.Seq != pauseRes.Transition.Seq || res.First.To != statemodel.StatePaused {
		t.Fatalf("old pause again: %s %+v, err %v; want duplicate of seq %d", res.Outcome, res.First, err, pauseRes.Transition.Seq)
	}
	// CREATED + resume has no row: statemodel alone would reject it.
	res, err = h.Store.Transition(ctx, key, firstResume, now, Policy())
	if err != nil || res.Outcome != statemodel.Duplicate || res.First.To != statemodel.StateCreated {
		t.Fatalf("old resume again: %s %+v, err %v; want duplicate", res.Outcome, res.First, err)
	}
	if after := h.MustInstance(t, key); after.Snapshot.Version != inst.Snapshot.Version {
		t.Fatalf("version moved from %d to %d", inst.Snapshot.Version, after.Snapshot.Version)
	}
}

// leaseExpiryAfterHeartbeat: a heartbeat refreshed the lease, so the
// reconciler's lease.expired is rejected as not due and changes nothing.
func leaseExpiryAfterHeartbeat(t *testing.T, h *Harness) {
	ctx := context.Background()
	p := Policy()
	v := h.MustCreate(t, NewRun("lease", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	seen := h.MustInstance(t, key)
	late := h.Clock.Advance(p.Timeouts.Heartbeat + time.Second)
	if _, err := h.Store.Heartbeat(ctx, key, 1, late, p.Timeouts.Heartbeat); err != nil {
		t.Fatal(err)
	}
	res, err := h.Store.Transition(ctx, key, Ev(statemodel.EvLeaseExpired, 1), late, p)
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrNotDue) {
		t.Fatalf("lease.expired after a heartbeat: %s, %v; want rejected, not due", res.Outcome, err)
	}
	inst := h.MustInstance(t, key)
	if inst.Snapshot.State != statemodel.StateRunning || inst.Snapshot.Version != seen.Snapshot.Version {
		t.Fatalf("instance %s v%d, want RUNNING v%d", inst.Snapshot.State, inst.Snapshot.Version, seen.Snapshot.Version)
	}
}

// attemptsBeyondTheSnapshot: manual retries add attempts without limit; the
// snapshot holds the latest statemodel.MaxInlineAttempts, every attempt
// stays readable with its own record, and a late event of an attempt the
// snapshot no longer holds is still recorded on it.
func attemptsBeyondTheSnapshot(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("many-attempts", "main"))
	key := v.Tasks[0].Instance.Key
	now := h.Clock.Now()
	h.Step(t, key, Ev(statemodel.EvDepsMet, 0), now)
	ref := strings.Repeat("r", 2048) // the largest output_ref a worker may report
	const total = 2*statemodel.MaxInlineAttempts + 1
	for n := 1; n <= total; n++ {
		h.Step(t, key, Dispatch(n), now)
		h.Step(t, key, Started(n, "w"), now)
		failed := Ev(statemodel.EvFailed, n)
		failed.OutputRef, failed.ErrorCategory, failed.Retryable = ref, "boom", new(bool)
		h.Step(t, key, failed, now)
		if n < total {
			retry := Ev(statemodel.EvManualRetry, 0)
			retry.Operator, retry.Reason = "ana", "again"
			h.Step(t, key, retry, now)
		}
	}
	inst := h.MustInstance(t, key)
	if got := len(inst.Snapshot.Attempts); got != statemodel.MaxInlineAttempts || inst.Snapshot.Attempt != total {
		t.Fatalf("the snapshot holds %d records at attempt %d, want %d at %d", got, inst.Snapshot.Attempt, statemodel.MaxInlineAttempts, total)
	}
	view, err := h.Store.ReadRun(ctx, key.Run)
	if err != nil {
		t.Fatal(err)
	}
	if atts := view.Tasks[0].Attempts; len(atts) != total {
		t.Fatalf("the run reads %d attempts, want %d", len(atts), total)
	}
	for n := 1; n <= total; n++ {
		a, err := h.Store.GetAttempt(ctx, key, n)
		if err != nil || a.N != n || a.Outcome != statemodel.OutcomeFailed || a.OutputRef != ref || a.TokenHash != fmt.Sprintf("hash-%d", n) {
			t.Fatalf("attempt %d: n %d, outcome %s, output_ref %d bytes, token hash %q (%v)", n, a.N, a.Outcome, len(a.OutputRef), a.TokenHash, err)
		}
	}
	late := Ev(statemodel.EvSucceeded, 1)
	if res, err := h.Store.Transition(ctx, key, late, now, Policy()); err != nil || res.Outcome != statemodel.Stale {
		t.Fatalf("attempt 1's late success: %s, %v", res.Outcome, err)
	}
	a1, err := h.Store.GetAttempt(ctx, key, 1)
	if err != nil || len(a1.Late) != 1 || a1.Late[0].EventID != late.ID || a1.TokenHash != "hash-1" {
		t.Fatalf("attempt 1: %+v, %v", a1, err)
	}
	if _, err := h.Store.GetAttempt(ctx, key, total+1); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("attempt %d: %v, want ErrNotFound", total+1, err)
	}
	if _, err := h.Store.GetAttempt(ctx, key, 0); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("attempt 0: %v, want ErrInvalidInput", err)
	}
}

// storedPolicy: ledger.StoredPolicy decides with the instance's own policy.
func storedPolicy(t *testing.T, h *Harness) {
	nr := NewRun("stored-policy", "main")
	nr.Tasks[0].Policy.Retry.MaxAttempts = 1 // no retry
	v := h.MustCreate(t, nr)
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	res, err := h.Store.Transition(context.Background(), key, Ev(statemodel.EvFailed, 1), now, ledger.StoredPolicy(nil))
	if err != nil || res.Outcome != statemodel.Applied || res.Snapshot.State != statemodel.StateFailed {
		t.Fatalf("failure under the stored policy (one attempt): %s %s %v; want FAILED", res.Outcome, res.Snapshot.State, err)
	}
}

// transitionErrors: a missing instance, a rejected event, a malformed one.
func transitionErrors(t *testing.T, h *Harness) {
	ctx := context.Background()
	_, err := h.Store.Transition(ctx, ledger.InstanceKey{Run: "missing", Task: "main"}, Ev(statemodel.EvDepsMet, 0), T0, Policy())
	if !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("missing instance: %v, want not found", err)
	}
	v := h.MustCreate(t, NewRun("errs", "main"))
	key := v.Tasks[0].Instance.Key
	res, err := h.Store.Transition(ctx, key, Started(1, "w"), T0, Policy())
	if res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrUnknownAttempt) {
		t.Fatalf("claim of an undispatched attempt: %s %v", res.Outcome, err)
	}
	var te *statemodel.TransitionError
	if !errors.As(err, &te) || te.State != statemodel.StateCreated {
		t.Fatalf("error %v does not carry the transition error", err)
	}
	noID := Ev(statemodel.EvDepsMet, 0)
	noID.ID = ""
	if res, err := h.Store.Transition(ctx, key, noID, T0, Policy()); res.Outcome != statemodel.Rejected || !errors.Is(err, statemodel.ErrInvalidEvent) {
		t.Fatalf("an event without an id: %s %v, want rejected, invalid event", res.Outcome, err)
	}
	if _, err := h.Store.Transition(ctx, ledger.InstanceKey{Run: key.Run, Task: "a#b"}, Ev(statemodel.EvDepsMet, 0), T0, Policy()); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("a task id with the key separator: %v, want invalid key", err)
	}
	if got := h.MustInstance(t, key); got.Snapshot.Version != v.Tasks[0].Instance.Snapshot.Version {
		t.Fatalf("refused events moved the instance to version %d", got.Snapshot.Version)
	}
}

// historyPages: History pages an instance's records in seq order with
// opaque tokens that no other listing accepts.
func historyPages(t *testing.T, h *Harness) {
	ctx := context.Background()
	v := h.MustCreate(t, NewRun("hist", "a", "b"))
	key := v.Tasks[0].Instance.Key
	now := h.ToQueued(t, key)
	h.Step(t, key, Started(1, "w"), now)
	h.Step(t, key, Succeeded(1), now)
	var seqs []int64
	token := ""
	for pages := 0; ; pages++ {
		page, next, err := h.Store.History(ctx, key, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 || pages > 5 {
			t.Fatalf("page %d holds %d records with limit 2", pages, len(page))
		}
		for _, tr := range page {
			seqs = append(seqs, tr.Seq)
		}
		if next == "" {
			break
		}
		if _, _, err := h.Store.History(ctx, v.Tasks[1].Instance.Key, 2, next); !errors.Is(err, ledger.ErrInvalidPageToken) {
			t.Fatalf("a token of %s on %s: %v, want invalid token", key, v.Tasks[1].Instance.Key, err)
		}
		token = next
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("history seqs %v, want 1..5 in order", seqs)
	}
	first := h.FullHistory(t, key)[0]
	if first.Event != statemodel.EvCreated || !statemodel.SameEvent(first.EventID, ledger.CreationEventID(key.Run, key.Task)) || first.To != statemodel.StateCreated {
		t.Fatalf("first record %+v, want instance.created", first)
	}
	if _, _, err := h.Store.History(ctx, key, 0, "not-a-token"); !errors.Is(err, ledger.ErrInvalidPageToken) {
		t.Fatalf("a made-up token: %v, want invalid token", err)
	}
}
