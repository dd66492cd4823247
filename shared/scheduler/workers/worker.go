package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// ErrBadMessage: a queue message that cannot be understood, or that
// proves nothing it claims (dropped, never redelivered). The worker
// routes' refusals are protocol's (protocol.ErrStaleAttempt, protocol.ErrAlreadyClaimed,
// ErrInvalidAttemptToken) and the state model's statemodel.ErrIllegalTransition.
var ErrBadMessage = fault.New(fault.Invalid, "bad message")

// instanceKey is the task instance an attempt belongs to.
func instanceKey(a protocol.AttemptRef) ledger.InstanceKey {
	return ledger.InstanceKey{Run: a.Run, Task: a.Task}
}

// Worker routes, as they scope a client's event ids.
const (
	routeClaim     = "claim"
	routeHeartbeat = "heartbeat"
	routeComplete  = "complete"
)

// scopedEventID is the id under which a worker's event is recorded and
// recognised again: the client's id scoped by route and attempt
// ("<route>:<attempt>:<client id>"). A client's id is unique only per
// (attempt, route, event_id) (docs/api.md); the state machine detects duplicates
// per instance, so the scope is part of the id. Client ids hold no colon,
// so a scoped id never equals one of the scheduler's own ids, none of
// which starts with a route's name.
func scopedEventID(a protocol.AttemptRef, route, clientID string) string {
	return fmt.Sprintf("%s:%d:%s", route, a.Attempt, clientID)
}

// ClientEventID is the id the worker sent for an event recorded as
// recorded: the inverse of scopedEventID, so history and late events show a
// worker the id it chose. The scheduler's own ids come back unchanged.
func ClientEventID(recorded string) string {
	route, rest, ok := strings.Cut(recorded, ":")
	if !ok || (route != routeClaim && route != routeHeartbeat && route != routeComplete) {
		return recorded
	}
	n, id, ok := strings.Cut(rest, ":")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return recorded
	}
	return id
}

// authorize reads the instance and checks the token against attempt n's
// stored hash. A claim reads the run with it (one call), for the envelope
// its answer carries; it may present the attempt's claim nonce instead of
// its token (byNonce, see checkClaimBearer); and it may come before the
// dispatch write that follows its envelope's send, so it waits, bounded,
// for that write when the attempt is the next one.
func (w *Room) authorize(ctx context.Context, ref protocol.AttemptRef, token string, claim bool) (inst ledger.Instance, run ledger.Run, byNonce bool, err error) {
	// An operational bound on real time, not domain time: an injected clock
	// that stands still must not make a claim wait forever.
	deadline := time.Now().Add(w.claimWait)
	// The dispatch write usually follows the envelope within a few
	// milliseconds; a busy table takes longer, and polling it harder only
	// delays the write awaited: the pauses double.
	pause := 5 * time.Millisecond
	for polls := 0; ; polls++ {
		if claim && polls == 0 {
			inst, run, err = w.store.GetInstanceAndRun(ctx, instanceKey(ref))
		} else {
			inst, err = w.store.GetInstance(ctx, instanceKey(ref)) // the run's params do not change
		}
		if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
			return ledger.Instance{}, ledger.Run{}, false, protocol.ErrInvalidAttemptToken
		}
		if err != nil {
			return ledger.Instance{}, ledger.Run{}, false, err
		}
		if claim {
			byNonce, err = w.checkClaimBearer(ctx, ref, token, inst)
		} else {
			err = w.checkToken(ctx, ref, token, inst)
		}
		pending := errors.Is(err, ErrNotDispatchedYet)
		if !pending {
			return inst, run, byNonce, err
		}
		if !claim {
			return ledger.Instance{}, ledger.Run{}, false, protocol.ErrInvalidAttemptToken
		}
		if !time.Now().Before(deadline) {
			// Not a wrong token yet: the dispatch write that would show
			// it is still on its way. Refusing would make the worker drop
			// the envelope, and the attempt would wait out its queue
			// timeout; asking it to claim again keeps the envelope.
			return ledger.Instance{}, ledger.Run{}, false, ErrNotDispatchedYet
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ledger.Instance{}, ledger.Run{}, false, ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, 200*time.Millisecond)
	}
}

// ErrNotDispatchedYet: a claim's attempt is the instance's next one, and
// the write that records its dispatch has not landed within the claim's
// wait (503: claim again shortly).
var ErrNotDispatchedYet = protocol.NewError(protocol.CodeUnavailable, "attempt not dispatched yet",
	"The attempt's dispatch is not recorded yet; claim again shortly.")

// checkToken checks the token against attempt n of inst, the instance as
// the caller read it: nil, protocol.ErrInvalidAttemptToken, or ErrNotDispatchedYet when
// the attempt is the next one of an instance still waiting for its
// dispatch write (CREATED or SCHEDULED).
func (w *Room) checkToken(ctx context.Context, ref protocol.AttemptRef, token string, inst ledger.Instance) error {
	if a, ok := inst.Snapshot.AttemptN(ref.Attempt); ok {
		// A signal attempt's token authorizes its signal and nothing else.
		if !protocol.TokenMatches(token, a.TokenHash) || a.Signal() {
			return protocol.ErrInvalidAttemptToken
		}
		return nil
	}
	if ref.Attempt >= 1 && ref.Attempt < inst.Snapshot.Attempt {
		return w.authorizeEvicted(ctx, ref, token)
	}
	st := inst.Snapshot.State
	if ref.Attempt == inst.Snapshot.Attempt+1 && (st == statemodel.StateScheduled || st == statemodel.StateCreated) {
		return ErrNotDispatchedYet
	}
	return protocol.ErrInvalidAttemptToken
}

// checkClaimBearer is checkToken for a claim, which also accepts attempt
// n's one-time claim nonce (Kernel.NonceMatches) as its bearer while attempt n is
// recorded and not claimed: byNonce reports that it was the nonce. Once
// the attempt is claimed the nonce is refused as any wrong token is, so a
// nonce read from a start environment after its process claimed is worth
// nothing; and a claim of the next attempt whose dispatch write has not
// landed waits for it as a token's does.
func (w *Room) checkClaimBearer(ctx context.Context, ref protocol.AttemptRef, bearer string, inst ledger.Instance) (byNonce bool, err error) {
	err = w.checkToken(ctx, ref, bearer, inst)
	if !errors.Is(err, protocol.ErrInvalidAttemptToken) {
		return false, err
	}
	if a, ok := inst.Snapshot.AttemptN(ref.Attempt); ok && !a.Claimed() && w.k.NonceMatches(inst, ref.Attempt, bearer) {
		return true, nil
	}
	return false, err
}

// authorizeEvicted checks the token of an attempt older than the
// instance holds (statemodel.MaxInlineAttempts) against its attempt item,
// so its late reports are answered stale, not invalid_token.
func (w *Room) authorizeEvicted(ctx context.Context, ref protocol.AttemptRef, token string) error {
	a, err := w.store.GetAttempt(ctx, instanceKey(ref), ref.Attempt)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return protocol.ErrInvalidAttemptToken
	case err != nil:
		return err
	case !protocol.TokenMatches(token, a.TokenHash):
		return protocol.ErrInvalidAttemptToken
	}
	return nil
}

// Claim moves attempt n from QUEUED to RUNNING for one worker. Exactly one
// claim of an attempt ever succeeds; the winner (the same worker id)
// retrying with the same event id is answered again, any other claim gets
// protocol.ErrAlreadyClaimed.
//
// The bearer is the attempt's token, or its one-time claim nonce (the
// start environment of an executor's process): a claim with the nonce is
// answered only by the write that claims the attempt, and its answer's
// envelope carries the token, to this claimer only. Any later use of the
// nonce is protocol.ErrInvalidAttemptToken, the same worker's retry included: a process
// whose claim answer was lost cannot claim again, and its attempt, claimed
// and silent, goes LOST and is resolved by the reconciler.
func (w *Room) Claim(ctx context.Context, ref protocol.AttemptRef, token, workerID, eventID string) (protocol.ClaimAnswer, error) {
	if err := protocol.CheckEventID(eventID); err != nil {
		return protocol.ClaimAnswer{}, err
	}
	inst, run, byNonce, err := w.authorize(ctx, ref, token, true)
	if err != nil {
		return protocol.ClaimAnswer{}, err
	}
	if byNonce {
		token, err = w.k.AttemptToken(inst, ref.Attempt)
		if err != nil {
			return protocol.ClaimAnswer{}, err
		}
	}
	// claimed answers the claim that won, from cur, the instance as the
	// claim left it; inputs too large end the attempt there.
	claimed := func(cur ledger.Instance) (protocol.ClaimAnswer, error) {
		env, err := w.claimEnvelope(ctx, inst, run, cur, ref.Attempt, token)
		if err != nil {
			return protocol.ClaimAnswer{}, err
		}
		return protocol.ClaimAnswer{Claimed: true, LeaseExpiresAt: cur.Snapshot.Lease.ExpiresAt, Envelope: &env}, nil
	}
	id := scopedEventID(ref, routeClaim, eventID)
	// Refuse a claim of an older attempt here: the store would record it as
	// a late event, and an error answer writes nothing (docs/api.md). The
	// winner's own retry goes on to the store, which answers it.
	if a, _ := inst.Snapshot.AttemptN(ref.Attempt); ref.Attempt < inst.Snapshot.Attempt && !wonBy(a, id, workerID) {
		return protocol.ClaimAnswer{}, protocol.ErrStaleAttempt
	}
	ev := statemodel.Event{ID: id, Type: statemodel.EvStarted, Actor: statemodel.ActorWorker, Attempt: ref.Attempt, WorkerID: workerID}
	res, err := w.store.TransitionFrom(ctx, inst, ev, w.k.Now(), w.k.Policy())
	switch {
	case err == nil && res.Outcome == statemodel.Applied:
		w.k.Follow(ctx, res)
		return claimed(res.Instance)
	case byNonce && err == nil && res.Outcome == statemodel.Duplicate:
		// A claim with this event id won since our read: the nonce was used.
		return protocol.ClaimAnswer{}, protocol.ErrInvalidAttemptToken
	case err == nil && res.Outcome == statemodel.Duplicate:
		// res.Snapshot is the instance as it stands after any race.
		if cur, _ := res.Snapshot.AttemptN(ref.Attempt); wonBy(cur, id, workerID) {
			return claimed(res.Instance)
		}
		return protocol.ClaimAnswer{}, protocol.ErrAlreadyClaimed
	case err == nil && res.Outcome == statemodel.Stale:
		return protocol.ClaimAnswer{}, protocol.ErrStaleAttempt
	}
	refusal := w.classifyRefusal(ctx, routeClaim, ref, inst, err)
	if byNonce && errors.Is(refusal, protocol.ErrAlreadyClaimed) {
		return protocol.ClaimAnswer{}, protocol.ErrInvalidAttemptToken // another claim won since our read: the nonce was used
	}
	return protocol.ClaimAnswer{}, refusal
}

// wonBy reports whether attempt a was claimed by this claim: its event id
// and its worker. The same id from another worker is not the winner's
// retry.
func wonBy(a statemodel.AttemptRecord, id, workerID string) bool {
	return a.Claimed() && a.ClaimEventID == id && a.WorkerID == workerID
}

// classifyRefusal turns a rejected worker event into the protocol's
// answer, by what the refusal and the instance as it stands say: a store
// error keeps its own meaning (an item over DynamoDB's limit is
// payload_too_large); an older attempt is stale; a claim of an attempt
// another worker holds is already_claimed; anything else the state does
// not allow is illegal_transition.
func (w *Room) classifyRefusal(ctx context.Context, route string, ref protocol.AttemptRef, before ledger.Instance, err error) error {
	if w.k.Transient(err) || errors.Is(err, ledger.ErrItemTooLarge) || errors.Is(err, ledger.ErrInvalidKey) ||
		errors.Is(err, ledger.ErrInvalidInput) {
		return err
	}
	inst, rerr := w.store.GetInstance(ctx, instanceKey(ref))
	if rerr != nil {
		inst = before
	}
	snap := inst.Snapshot
	switch {
	case ref.Attempt < snap.Attempt:
		return protocol.ErrStaleAttempt
	case snap.State.Terminal() || snap.State == statemodel.StateCancelling || snap.CancelRequested:
		return fmt.Errorf("%w: instance is %s: %v", statemodel.ErrIllegalTransition, snap.State, err)
	}
	if a, ok := snap.AttemptN(ref.Attempt); ok && a.Claimed() && route == routeClaim {
		return protocol.ErrAlreadyClaimed
	}
	return fmt.Errorf("%w: instance is %s: %v", statemodel.ErrIllegalTransition, snap.State, err)
}

// Heartbeat renews attempt n's lease: one cheap conditional update, no
// history. From the current attempt while LOST it is a real transition back
// to RUNNING (or CANCELLING when a cancel waits).
func (w *Room) Heartbeat(ctx context.Context, ref protocol.AttemptRef, token, eventID string) (protocol.HeartbeatAnswer, error) {
	if err := protocol.CheckEventID(eventID); err != nil {
		return protocol.HeartbeatAnswer{}, err
	}
	inst, _, _, err := w.authorize(ctx, ref, token, false)
	if err != nil {
		return protocol.HeartbeatAnswer{}, err
	}
	now := w.k.Now()
	hb, err := w.store.Heartbeat(ctx, instanceKey(ref), ref.Attempt, now, inst.Policy.Timeouts.Heartbeat)
	switch {
	case err == nil:
		return protocol.HeartbeatAnswer{CancelRequested: hb.CancelRequested, LeaseExpiresAt: hb.LeaseExpiresAt, State: hb.State}, nil
	case errors.Is(err, ledger.ErrStaleAttempt):
		return protocol.HeartbeatAnswer{}, protocol.ErrStaleAttempt
	case errors.Is(err, ledger.ErrLostNeedsTransition):
		// The one heartbeat whose id matters: it moves LOST -> RUNNING.
		ev := statemodel.Event{ID: scopedEventID(ref, routeHeartbeat, eventID), Type: statemodel.EvHeartbeat, Actor: statemodel.ActorWorker, Attempt: ref.Attempt}
		res, terr := w.store.TransitionFrom(ctx, inst, ev, now, w.k.Policy())
		if terr != nil {
			return protocol.HeartbeatAnswer{}, w.classifyRefusal(ctx, routeHeartbeat, ref, inst, terr)
		}
		w.k.Follow(ctx, res)
		snap := res.Snapshot
		return protocol.HeartbeatAnswer{CancelRequested: snap.CancelRequested, LeaseExpiresAt: snap.Lease.ExpiresAt, State: snap.State}, nil
	}
	return protocol.HeartbeatAnswer{}, w.classifyRefusal(ctx, routeHeartbeat, ref, inst, err)
}

// ErrInvalidCompletion: the report itself is malformed.
var ErrInvalidCompletion = fault.New(fault.Invalid, "invalid completion")

// Complete applies a worker's completion report. The report is validated
// here as the API and the events queue validate it (protocol.Completion's
// Validate), so a caller that skipped it still meets the contract's limits.
func (w *Room) Complete(ctx context.Context, c protocol.Completion, token string) (protocol.CompleteAnswer, error) {
	if err := c.Validate(); err != nil {
		return protocol.CompleteAnswer{}, fmt.Errorf("%w: %w", ErrInvalidCompletion, err)
	}
	typ := statemodel.EvSucceeded
	switch c.Outcome {
	case protocol.OutcomeFailed:
		typ = statemodel.EvFailed
	case protocol.OutcomeCancelled:
		typ = statemodel.EvCancelled
	}
	ref := c.Ref()
	view, inst, err := w.authorizeInRun(ctx, ref, token)
	if err != nil {
		return protocol.CompleteAnswer{}, err
	}
	ev := statemodel.Event{
		ID: scopedEventID(ref, routeComplete, c.EventID), Type: typ, Actor: statemodel.ActorWorker, Attempt: c.Attempt,
		EventTime: c.EventTime, ExitCode: c.ExitCode, ErrorCategory: c.ErrorCategory,
		Retryable: c.Retryable, OutputRef: c.OutputRef, Reason: c.Reason,
		Output: protocol.CompactOutput(c.Output),
	}
	res, err := w.store.TransitionFrom(ctx, inst, ev, w.k.Now(), w.k.Policy())
	if err != nil {
		return protocol.CompleteAnswer{}, w.classifyRefusal(ctx, routeComplete, ref, inst, err)
	}
	if res.Outcome == statemodel.Applied {
		// The run as read, with this task as written: advancing it needs
		// no read.
		for i := range view.Tasks {
			if view.Tasks[i].Instance.Key == inst.Key {
				view.Tasks[i].Instance = res.Instance
			}
		}
		w.k.FollowInRun(ctx, res, view)
	}
	state := res.Snapshot.State
	return protocol.CompleteAnswer{Result: string(res.Outcome), State: state}, nil
}

// authorizeInRun reads the attempt's whole run (one Query: its task is in
// it) and checks the token. A completion usually ends its task, and then
// its run is advanced from this read, not from another.
func (w *Room) authorizeInRun(ctx context.Context, ref protocol.AttemptRef, token string) (ledger.RunView, ledger.Instance, error) {
	if _, _, child := ledger.ParseChild(ref.Task); child {
		return w.authorizeChild(ctx, ref, token)
	}
	view, err := w.store.ReadRun(ctx, ref.Run)
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
		return ledger.RunView{}, ledger.Instance{}, protocol.ErrInvalidAttemptToken
	}
	if err != nil {
		return ledger.RunView{}, ledger.Instance{}, err
	}
	for _, t := range view.Tasks {
		if t.Instance.Key.Task != ref.Task {
			continue
		}
		err := w.checkToken(ctx, ref, token, t.Instance)
		if errors.Is(err, ErrNotDispatchedYet) {
			err = protocol.ErrInvalidAttemptToken
		}
		return view, t.Instance, err
	}
	return ledger.RunView{}, ledger.Instance{}, protocol.ErrInvalidAttemptToken
}

// authorizeChild is authorizeInRun for a map child: its instance alone
// (one GetItem), never its run's tasks or its siblings.
func (w *Room) authorizeChild(ctx context.Context, ref protocol.AttemptRef, token string) (ledger.RunView, ledger.Instance, error) {
	inst, err := w.store.GetInstance(ctx, instanceKey(ref))
	if errors.Is(err, ledger.ErrNotFound) || errors.Is(err, ledger.ErrInvalidKey) {
		return ledger.RunView{}, ledger.Instance{}, protocol.ErrInvalidAttemptToken
	}
	if err != nil {
		return ledger.RunView{}, ledger.Instance{}, err
	}
	err = w.checkToken(ctx, ref, token, inst)
	if errors.Is(err, ErrNotDispatchedYet) {
		err = protocol.ErrInvalidAttemptToken
	}
	return ledger.RunView{}, inst, err
}
