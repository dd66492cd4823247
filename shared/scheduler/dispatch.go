package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// dispatch sends attempt n+1 of a SCHEDULED instance to its pool's queue,
// records the executor's acceptance (SCHEDULED -> QUEUED), performs what
// that yields, and returns the instance as written.
func (s *Service) dispatch(ctx context.Context, inst ledger.Instance, run ledger.Run) (ledger.Instance, error) {
	written, more, err := s.dispatchEffect(ctx, effect{kind: effDispatch, key: inst.Key, inst: inst, run: &run, runID: run.ID})
	s.perform(ctx, more...)
	return written, err
}

// dispatchEffect performs one dispatch effect (see dispatchAll).
func (s *Service) dispatchEffect(ctx context.Context, e effect) (ledger.Instance, []effect, error) {
	outs := s.dispatchAll(ctx, []effect{e})
	return outs[0].inst, outs[0].more, outs[0].err
}

// dispatched is what became of one dispatch effect.
type dispatched struct {
	inst ledger.Instance
	more []effect
	err  error
}

// pendingDispatch is a dispatch between its phases: its envelope built,
// not yet sent.
type pendingDispatch struct {
	inst   ledger.Instance
	events []statemodel.Event // written before dispatch.accepted (a verdict)
	n      int
	url    string
	hash   string
	entry  queue.Entry
	// ex, spec and env: an attempt started by an Executor instead of a
	// send to url.
	ex   Executor
	spec jobspec.Executor
	env  protocol.Envelope
}

// dispatchAll sends the next attempt of each effect's instance and records
// it, from the instance and run each effect holds (a run it does not hold
// is read for its params and logical time). The envelopes of a fan-out go
// to their queues in batches (SendMessageBatch); each instance is then one
// conditional write.
//
// Send first, write second. Attempt n's token is derived from the
// instance's secret (attemptToken), so every envelope sent for attempt n,
// by whichever dispatcher, carries the token its claim accepts: if two
// dispatchers race, one write records attempt n and the other envelope is
// a true duplicate, claimed as the contract says for a second delivery
// (the same worker gets its first answer, another 409 already_claimed);
// exactly one worker runs the attempt. A claim that arrives before the
// write lands waits for it (workers.Room.Claim).
//
// With depsMet the instance is CREATED. For a task with one upstream task
// its dependency verdict rides in the dispatch's write: deps.met and
// dispatch.accepted, one conditional write after the send; when the send
// fails, deps.met alone is written, and the SCHEDULED instance's timer
// tries the dispatch again. For a join (verdictFirst) the verdict is
// written first, on its own: evaluators racing on it make one write win,
// and only its writer sends, so racing evaluators send one envelope.
//
// A dispatch that fails before the queue took the envelope is retried by
// the instance's timer until the queue timeout since it became SCHEDULED;
// then the instance fails (undispatchable).
func (s *Service) dispatchAll(ctx context.Context, effs []effect) []dispatched {
	outs := make([]dispatched, len(effs))
	pending := make([]*pendingDispatch, len(effs))
	byURL := map[string][]int{}
	for i, e := range effs {
		p, out := s.prepareDispatch(ctx, e)
		if p == nil {
			outs[i] = out
			continue
		}
		pending[i] = p
		if p.ex != nil {
			outs[i] = s.startAttempt(ctx, p)
			continue
		}
		byURL[p.url] = append(byURL[p.url], i)
	}
	for url, all := range byURL {
		// Sent a chunk at a time, each chunk's dispatch writes side by
		// side before the next is sent: a worker may claim as soon as its
		// envelope is sent, and waits for its write, not a whole fan-out's.
		for start := 0; start < len(all); start += dispatchWriters {
			idx := all[start:min(len(all), start+dispatchWriters)]
			entries := make([]queue.Entry, len(idx))
			for j, i := range idx {
				entries[j] = pending[i].entry
			}
			results, err := s.queue.SendBatch(ctx, url, entries)
			var wg sync.WaitGroup
			for j, i := range idx {
				p := pending[i]
				wg.Go(func() {
					switch {
					case err != nil:
						outs[i].inst, outs[i].more, outs[i].err = s.undispatchable(ctx, p.inst, p.events, p.n, fmt.Errorf("send: %w", err))
					case results[j].Err != nil:
						outs[i].inst, outs[i].more, outs[i].err = s.undispatchable(ctx, p.inst, p.events, p.n, fmt.Errorf("send: %w", results[j].Err))
					default:
						outs[i] = s.recordDispatch(ctx, p, results[j].ID)
					}
				})
			}
			wg.Wait()
		}
	}
	return outs
}

// dispatchWriters is how many envelopes go in one send (the queue's
// batch), and so how many dispatch writes are in flight at once.
const dispatchWriters = 10

// startAttempt starts a prepared attempt through its executor and records
// it; a Start error is a failed dispatch, as a failed send is.
func (s *Service) startAttempt(ctx context.Context, p *pendingDispatch) dispatched {
	id, err := p.ex.Start(ctx, p.env, p.spec)
	if err == nil && id == "" {
		err = errors.New("the executor returned no id")
	}
	if err != nil {
		var out dispatched
		out.inst, out.more, out.err = s.undispatchable(ctx, p.inst, p.events, p.n, fmt.Errorf("start on %s: %w", p.spec, err))
		return out
	}
	return s.recordDispatch(ctx, p, id)
}

// prepareDispatch builds the envelope of e's next attempt; nil with the
// outcome when there is nothing to send (the instance moved on, or the
// dispatch cannot be built).
func (s *Service) prepareDispatch(ctx context.Context, e effect) (*pendingDispatch, dispatched) {
	inst := e.inst
	key, snap := inst.Key, inst.Snapshot
	want := statemodel.StateScheduled
	if e.depsMet {
		want = statemodel.StateCreated
	}
	if snap.State != want {
		return nil, dispatched{inst: inst}
	}
	if len(inst.Map) > 0 {
		inst, more, err := s.maps.Start(ctx, inst, e.run)
		return nil, dispatched{inst: inst, more: more, err: err}
	}
	if e.depsMet && !e.soleVerdict && verdictFirst(inst) {
		written, won, err := s.writeVerdict(ctx, inst)
		if !won {
			return nil, dispatched{inst: written, err: err}
		}
		inst, snap = written, written.Snapshot
	}
	p := &pendingDispatch{inst: inst, n: snap.Attempt + 1}
	if snap.State == statemodel.StateCreated {
		p.events = append(p.events, statemodel.Event{ID: ledger.DepsEventID(snap.Seq), Type: statemodel.EvDepsMet, Actor: statemodel.ActorScheduler})
	}
	fail := func(cause error) (*pendingDispatch, dispatched) {
		var out dispatched
		out.inst, out.more, out.err = s.undispatchable(ctx, inst, p.events, p.n, cause)
		return nil, out
	}
	spec, err := instanceExecutor(inst)
	if err != nil {
		return fail(err)
	}
	if spec.IsQueue() {
		url, ok := s.cfg.Pools[inst.Pool]
		if !ok {
			return fail(fmt.Errorf("pool %q has no queue", inst.Pool))
		}
		p.url = url
	} else if p.ex, err = s.executors.of(spec); err != nil {
		return fail(err)
	}
	p.spec = spec
	run := ledger.Run{}
	if e.run != nil {
		run = *e.run
	} else {
		r, err := s.store.GetRun(ctx, key.Run)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return nil, dispatched{inst: inst, err: err}
		}
		run = r
	}
	if sl, ok := s.flow.SlotOf(run, key); ok {
		held, stands, err := s.flow.HoldSlot(ctx, inst, sl, e.handedOn)
		if held == nil {
			return nil, dispatched{inst: stands, err: err}
		}
		inst, p.inst, p.events = *held, *held, nil
	}
	token, hash, err := attemptToken(inst, p.n)
	if err != nil {
		return nil, dispatched{inst: inst, err: err}
	}
	p.hash = hash
	if p.ex != nil {
		p.env = envelopeOf(inst, run, p.n, token, s.now())
		p.env.ClaimNonce = attemptNonce(inst, p.n)
		return p, dispatched{}
	}
	body, attrs, err := envelopeMessage(inst, run, p.n, token, s.now())
	if err != nil {
		return fail(err)
	}
	p.entry = queue.Entry{Body: body, Attrs: attrs}
	return p, dispatched{}
}

// verdictFirst reports whether a task's dependency verdict is written
// before its envelope is built and sent, as a write of its own, rather
// than in the write that records the dispatch. It is for a task that
// waits on two or more upstream tasks (a join), or on other jobs' runs:
// their completions, finishing together, each evaluate the run and may
// each find its dependencies met. Only the evaluator whose verdict write
// wins sends; the other's write fails its condition and it sends
// nothing. A task with one upstream task is decided by that task's
// completion alone in the common case, so it keeps the one write after
// the send, and a chain step costs no extra round trip.
func verdictFirst(inst ledger.Instance) bool { return len(inst.DependsOn) != 1 }

// writeVerdict writes the dependency verdict (deps.met) of a CREATED
// instance on its own and reports whether this call's write won: false
// when another evaluator wrote it first (the instance as found, nothing to
// send) or when it failed. The instance is SCHEDULED once it is written,
// and its timer dispatches it if this dispatcher stops before sending.
func (s *Service) writeVerdict(ctx context.Context, inst ledger.Instance) (ledger.Instance, bool, error) {
	key := inst.Key
	ev := statemodel.Event{ID: ledger.DepsEventID(inst.Snapshot.Seq), Type: statemodel.EvDepsMet, Actor: statemodel.ActorScheduler}
	res, err := s.store.TransitionFrom(ctx, inst, ev, s.now(), s.policy())
	if err != nil {
		if transient(err) {
			return inst, false, fmt.Errorf("dispatch %s: dependency verdict: %w", key, err)
		}
		// Moved on by another writer since it was read (the verdict's
		// event is illegal where it stands): it is not ours to send.
		s.log.InfoContext(ctx, "dependency verdict decided elsewhere", "run_id", key.Run, "task", key.Task, "error", err.Error())
		return inst, false, nil
	}
	if res.Outcome != statemodel.Applied {
		s.log.InfoContext(ctx, "dependency verdict decided elsewhere", "run_id", key.Run, "task", key.Task, "outcome", string(res.Outcome))
		return res.Instance, false, nil
	}
	// Its effects are this dispatch: none is performed besides.
	s.applied(ctx, res)
	return res.Instance, true, nil
}

// recordDispatch writes a sent dispatch: its verdict, if any, and
// dispatch.accepted, as one conditional write. msgID is the SQS message id,
// or the executor's id for an attempt an Executor started.
func (s *Service) recordDispatch(ctx context.Context, p *pendingDispatch, msgID string) dispatched {
	key, n := p.inst.Key, p.n
	accepted := statemodel.Event{
		ID: fmt.Sprintf("dispatch:%d", n), Type: statemodel.EvDispatched, Actor: statemodel.ActorExecutor,
		Attempt: n, TokenHash: p.hash, ExecutorID: msgID,
		Evidence: map[string]string{"message_id": msgID, "queue": p.url},
	}
	if p.ex != nil {
		accepted.Executor = p.spec.Type
		accepted.Evidence = map[string]string{"executor": p.spec.Type, "executor_id": msgID}
	}
	events := append(p.events, accepted)
	if p.spec.Type == jobspec.ExecutorSignal {
		events = append(events, signals.StartEvent(n))
	}
	res, err := s.store.TransitionAll(ctx, p.inst, events, s.now(), s.policy())
	if err != nil {
		return dispatched{inst: p.inst, err: fmt.Errorf("dispatch %s#%d: record: %w", key, n, err)}
	}
	if res.Outcome != statemodel.Applied {
		// Another dispatcher recorded attempt n (or the verdict) first. Our
		// envelope carries the same token as its (attemptToken): a true
		// duplicate, whose claim is answered as the contract says for a
		// second delivery. (An instance without a secret: a token that
		// matches nothing, refused at the claim.)
		s.log.InfoContext(ctx, "duplicate dispatch", "run_id", key.Run, "task", key.Task, "attempt", n, "outcome", string(res.Outcome))
	}
	s.applied(ctx, res)
	if p.spec.Type == jobspec.ExecutorSignal && res.Outcome == statemodel.Applied {
		s.signals.Announce(ctx, res.Instance, n, p.env.Token)
	}
	return dispatched{inst: res.Instance, more: effectsOf(res)}
}

// undispatchable answers a dispatch of attempt n that failed before the
// queue took its envelope, after writing the events that precede the
// dispatch (a dependency verdict), so the instance waits SCHEDULED. Within
// the queue timeout since the instance became SCHEDULED it is an error,
// and the instance's timer tries again on a later pass. Past it, the
// instance goes SCHEDULED -> FAILED with category dispatch_failed and the
// error as the transition's reason, with no retry: a message the queue
// refuses for that long (too large, a character SQS refuses, a pool
// without a queue) would be refused again.
func (s *Service) undispatchable(ctx context.Context, inst ledger.Instance, before []statemodel.Event, n int, cause error) (ledger.Instance, []effect, error) {
	key := inst.Key
	if len(before) > 0 {
		res, err := s.store.TransitionAll(ctx, inst, before, s.now(), s.policy())
		if err != nil {
			return inst, nil, fmt.Errorf("dispatch %s#%d: %v; and recording its verdict: %w", key, n, cause, err)
		}
		s.applied(ctx, res)
		inst = res.Instance
		if inst.Snapshot.State != statemodel.StateScheduled {
			return inst, nil, fmt.Errorf("dispatch %s#%d: %w", key, n, cause)
		}
	}
	snap := inst.Snapshot
	timeout := inst.Policy.Timeouts.Queue
	if s.now().Before(snap.Deadline.Add(timeout)) {
		return inst, nil, fmt.Errorf("dispatch %s#%d: %w", key, n, cause)
	}
	target := "pool " + inst.Pool
	if spec, err := instanceExecutor(inst); err == nil && !spec.IsQueue() {
		target = spec.String()
	}
	ev := statemodel.Event{
		ID: fmt.Sprintf("dispatch-failed:%d", n), Type: statemodel.EvDispatchFailed, Actor: statemodel.ActorScheduler,
		Reason: protocol.ClipReason(fmt.Sprintf("attempt %d could not be dispatched to %s within the queue timeout (%s): %v",
			n, target, timeout, cause)),
		Evidence: map[string]string{"attempt": strconv.Itoa(n), "pool": inst.Pool},
	}
	res, err := s.store.TransitionFrom(ctx, inst, ev, s.now(), s.policy())
	if err != nil {
		return inst, nil, fmt.Errorf("dispatch %s#%d: record dispatch failure (%v): %w", key, n, cause, err)
	}
	if res.Outcome == statemodel.Applied {
		s.log.ErrorContext(ctx, "dispatch failed for good", "run_id", key.Run, "task", key.Task, "attempt", n, "error", cause.Error())
		s.applied(ctx, res)
	}
	return res.Instance, effectsOf(res), nil
}

// envelopeMessage is the dispatch message of attempt n: the envelope's JSON
// (package protocol owns its wire format, docs/api.md, "Workers") and the message
// attributes. CheckEnvelopes builds the same message when a run is
// triggered, so a run whose envelope SQS would refuse is never created.
func envelopeMessage(inst ledger.Instance, run ledger.Run, n int, token string, now time.Time) (string, map[string]string, error) {
	key := inst.Key
	body, err := wire.Marshal(envelopeOf(inst, run, n, token, now))
	if err != nil {
		return "", nil, err
	}
	attrs := map[string]string{"run": key.Run, "task": key.Task, "attempt": strconv.Itoa(n)}
	return string(body), attrs, nil
}

// envelopeOf is attempt n's envelope, dispatched at queued.
func envelopeOf(inst ledger.Instance, run ledger.Run, n int, token string, queued time.Time) protocol.Envelope {
	key, p := inst.Key, inst.Policy
	return protocol.Envelope{
		Job: inst.Job, Run: key.Run, Task: key.Task, Attempt: n, Token: token, Pool: inst.Pool,
		LogicalTime: run.LogicalTime,
		Payload:     rawOrNil(inst.Payload), Params: rawOrNil(run.Params),
		HeartbeatInterval: p.Timeouts.Heartbeat / 3,
		RunTimeout:        p.Timeouts.Run,
		ClaimBy:           queued.Add(p.Timeouts.Queue),
	}
}

// claimEnvelope is the envelope a claim of attempt n answers with: the one
// its dispatch sent, rebuilt from the instance, its run and the token the
// claim presented (docs/api.md: an executor that starts a process with only
// run, task, attempt and token fetches its payload and params by claiming).
func claimEnvelope(inst ledger.Instance, run ledger.Run, n int, token string) protocol.Envelope {
	a, _ := inst.Snapshot.AttemptN(n)
	return envelopeOf(inst, run, n, token, a.QueuedAt)
}

// EnvelopeError: a task of a run being triggered would get a dispatch
// message the queue refuses, so the run is not created (a run that can
// never be dispatched would wait SCHEDULED until dispatch_failed).
type EnvelopeError struct {
	Task string
	// TooLarge: over SQS's message limit (queue.MaxPayloadBytes); else a
	// character SQS refuses (U+FFFE, U+FFFF) in the payload or params.
	TooLarge bool
	Size     int
}

func (e *EnvelopeError) Error() string {
	if e.TooLarge {
		return fmt.Sprintf("task %s: its dispatch message would be %d bytes, over the limit of %d", e.Task, e.Size, queue.MaxPayloadBytes)
	}
	return fmt.Sprintf("task %s: its dispatch message would hold a character the queue refuses", e.Task)
}

// checkEnvelopes builds the dispatch message every task of nr would get,
// with a real token and an attempt number no real attempt reaches (so no
// real message is longer), and checks each against the queue's rules.
func checkEnvelopes(nr ledger.NewRun, now time.Time) error {
	token, _, err := newToken()
	if err != nil {
		return err
	}
	run := ledger.Run{ID: nr.ID, Job: nr.Job, LogicalTime: nr.LogicalTime, Params: nr.Params}
	for _, t := range nr.Tasks {
		key := ledger.InstanceKey{Run: nr.ID, Task: t.ID}
		inst := ledger.Instance{Key: key, Job: nr.Job, Pool: t.Pool, Payload: t.Payload, Policy: t.Policy}
		body, attrs, err := envelopeMessage(inst, run, math.MaxInt32, token, now)
		if err != nil {
			return fmt.Errorf("envelope of %s: %w", key, err)
		}
		if err := queue.ValidateMessage(body, attrs); err != nil {
			return &EnvelopeError{Task: t.ID, TooLarge: errors.Is(err, queue.ErrPayloadTooLarge), Size: queue.PayloadSize(body, attrs)}
		}
	}
	return nil
}

func rawOrNil(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}
