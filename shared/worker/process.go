package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/wire"
)

// claimTries is how many times one delivery tries to claim through
// transient failures (same event id) before leaving the message for
// redelivery.
const claimTries = 3

// delivery is one received dispatch message.
type delivery struct {
	messageID    string
	receipt      string
	body         string
	receiveCount int
}

// disposition is what becomes of a delivery's message.
type disposition int

const (
	// dispositionDone: handled, refused or unusable; the message may go.
	dispositionDone disposition = iota
	// dispositionRetry: leave the message for redelivery.
	dispositionRetry
)

// mode is what differs between Run and HandleSQS.
type mode struct {
	// ops bounds claims, heartbeats, reports and deletes.
	ops context.Context
	// handlerParent is the parent of every handler's ctx; Run cancels it
	// (cause errShutdown) when the shutdown grace period ends.
	handlerParent context.Context
	// handlerDeadline (HandleSQS) ends handlers before the invocation does.
	handlerDeadline time.Time
	// ownsMessage: the worker extends the message's visibility and
	// deletes it (Run). Under Lambda the event source mapping does both.
	ownsMessage bool
	stopWait    time.Duration
}

// process takes one delivery through claim, run and report, and says what
// becomes of its message.
func (w *Worker) process(d delivery, m mode) disposition {
	ctx := m.ops
	log := w.log.With("message_id", d.messageID, "receive_count", d.receiveCount)
	env, err := ParseEnvelope(d.body)
	if err != nil {
		// No worker can ever run it; the scheduler's queue timeout takes
		// care of the attempt, if there is one.
		log.ErrorContext(ctx, "dropping a message that is not an envelope", "err", err, "body", summarize([]byte(d.body)))
		w.deleteMessage(ctx, d, log)
		return dispositionDone
	}
	ref := env.Ref()
	log = log.With("run_id", env.Run, "task_id", env.Task, "attempt", env.Attempt)
	if !m.handlerDeadline.IsZero() && time.Until(m.handlerDeadline) <= 0 {
		log.WarnContext(ctx, "too close to the invocation deadline to start; leaving the message")
		return dispositionRetry
	}

	claimSent := w.now()
	claimed, err := w.claim(ctx, env)
	if err != nil {
		switch {
		case isRefusal(err):
			// Exactly one claim wins; this delivery is a duplicate or
			// the attempt is no longer wanted.
			log.InfoContext(ctx, "claim refused; dropping the message", "err", err)
			w.deleteMessage(ctx, d, log)
			return dispositionDone
		case IsTransient(err) || ctx.Err() != nil:
			log.WarnContext(ctx, "claim failed; leaving the message for redelivery", "err", err)
		default:
			// An answer outside the contract (a wrong API URL, a proxy):
			// dropping would lose the attempt, so the message goes back
			// and, if this persists, to the dead-letter queue.
			log.ErrorContext(ctx, "claim answered outside the contract; leaving the message for redelivery", "err", err)
		}
		return dispositionRetry
	}
	// What runs is the attempt as the scheduler stored it, from the claim
	// answer: the message only named the attempt and carried its token.
	run, err := claimedEnvelope(ref, env.Token, claimed)
	if err != nil {
		// Claimed, but what to run is unknown: the attempt's lease runs out
		// and the scheduler retries it; a redelivery would be refused.
		log.ErrorContext(ctx, "claim answer unusable; running nothing", "err", err)
		w.deleteMessage(ctx, d, log)
		return dispositionDone
	}
	if !sameJSON(run.Payload, env.Payload) || !sameJSON(run.Params, env.Params) {
		log.WarnContext(ctx, "the message's payload or params differ from the claimed attempt's; running the claimed attempt's")
	}
	w.running.add(ref, run.Token)
	defer w.running.remove(ref)
	log.InfoContext(ctx, "attempt claimed")

	// Heartbeats and the message's visibility last until the report is out.
	keepCtx, stopKeep := context.WithCancel(ctx)
	var keepWG sync.WaitGroup
	defer func() { stopKeep(); keepWG.Wait() }()
	if m.ownsMessage {
		keepWG.Go(func() { w.keepHidden(keepCtx, d, log) })
	}

	comp, ok := w.runClaimed(keepCtx, &keepWG, run, claimSent, claimed.LeaseExpiresAt, m, log)
	if !ok {
		stopKeep()
		w.deleteMessage(ctx, d, log)
		return dispositionDone
	}
	if err := w.report(ctx, comp, log); err != nil {
		// The lease (which still lists the attempt until this returns)
		// and the redelivered message are what remains for the reconciler.
		log.ErrorContext(ctx, "completion not reported; leaving the message", "err", err, "event_id", comp.EventID)
		return dispositionRetry
	}
	// Only now may the message go: the API has the report, or it is
	// durable on the events queue.
	stopKeep()
	keepWG.Wait()
	w.deleteMessage(ctx, d, log)
	return dispositionDone
}

// runClaimed runs the handler on a claimed attempt, heartbeating on
// keepWG until keepCtx ends (the caller ends it once the report is out),
// and returns the completion to report; ok is false when nothing may be
// reported for the attempt. claimSent is when the claim was sent and
// leaseEnd the lease its answer gave.
func (w *Worker) runClaimed(keepCtx context.Context, keepWG *sync.WaitGroup, env Envelope, claimSent, leaseEnd time.Time, m mode, log *slog.Logger) (comp Completion, ok bool) {
	ctx := m.ops
	hctx, cancel := context.WithCancelCause(m.handlerParent)
	defer cancel(nil)
	if env.RunTimeout > 0 {
		var stop context.CancelFunc
		hctx, stop = context.WithTimeoutCause(hctx, env.RunTimeout, errRunTimeout)
		defer stop()
	}
	if !m.handlerDeadline.IsZero() {
		var stop context.CancelFunc
		hctx, stop = context.WithDeadlineCause(hctx, m.handlerDeadline, errLambdaDeadline)
		defer stop()
	}
	interval := env.HeartbeatInterval
	if interval <= 0 {
		interval = w.cfg.DefaultHeartbeatInterval
	}
	fence := newLeaseFence(w.now, interval)
	fence.renew(claimSent, leaseEnd)
	var handlerDone atomic.Bool
	keepWG.Go(func() { w.heartbeatLoop(keepCtx, env, interval, fence, cancel, &handlerDone, log) })
	keepWG.Go(func() { w.fenceLoop(keepCtx, fence, cancel, &handlerDone, log) })

	out := &taskOutput{}
	task := Task{
		Job: env.Job, Run: env.Run, Task: env.Task, Attempt: env.Attempt, LogicalTime: env.LogicalTime,
		Token: env.Token, Pool: env.Pool, Payload: env.Payload, Params: env.Params,
		WorkerID: w.id, Log: log, out: out, fence: fence,
		inputs: env.Inputs, item: env.Item, index: env.Index, commitFence: env.Fence,
	}
	started := time.Now()
	herr, returned, abandonedBy := w.runHandler(withTraceParent(hctx, env.TraceParent), task, m, log)
	handlerDone.Store(true)
	endedAt := w.now()

	var res result
	if returned {
		res = classify(ctx, herr, causeOf(hctx), log)
	} else {
		msg := "handler did not return after its context ended; reporting without it"
		if abandonedBy.silent {
			msg = "handler did not return after its context ended; going on without it"
		}
		log.ErrorContext(ctx, msg, "reason", abandonedBy.reason, "stop_wait", m.stopWait.String())
		res = result{outcome: abandonedBy.outcome, category: abandonedBy.category, retryable: true, report: !abandonedBy.silent}
	}
	if !res.report {
		// A newer attempt or the instance's state superseded this one, or
		// its lease ran out: whatever it did is no longer the attempt's
		// truth. (The lease's end was logged when it came.)
		if causeOf(hctx) != errLeaseLost {
			log.WarnContext(ctx, "attempt superseded; not reporting it", "handler_err", errString(herr))
		}
		return Completion{}, false
	}

	comp = Completion{
		Run: env.Run, Task: env.Task, Attempt: env.Attempt,
		EventID:   w.newEventID(),
		Outcome:   res.outcome,
		ExitCode:  res.exitCode,
		OutputRef: out.get(),
		EventTime: endedAt,
		Token:     env.Token,
	}
	if res.outcome == OutcomeSucceeded {
		comp.Output = out.getOutput()
	}
	if res.outcome != OutcomeSucceeded {
		retryable := res.retryable
		comp.ErrorCategory, comp.Retryable = res.category, &retryable
		comp.Reason = failureReason(herr, returned, causeOf(hctx), abandonedBy, res)
	}
	log.InfoContext(ctx, "attempt finished", "outcome", string(comp.Outcome), "error_category", comp.ErrorCategory,
		"retryable", comp.IsRetryable(), "handler_err", errString(herr), "run_ms", time.Since(started).Milliseconds(), "event_id", comp.EventID)
	return comp, true
}

// failureReason is the reason of a completion that is not a success: the
// handler's (see Reason), prefixed with why the worker stopped it when it
// did, or only that when the handler never returned.
func failureReason(herr error, returned bool, cause, abandonedBy *stopCause, res result) string {
	if !returned {
		return abandonedBy.reason
	}
	reason := Reason(herr)
	if cause != nil && res.category == cause.category {
		reason = ClipReason(cause.reason + ": " + reason)
	}
	return reason
}

// claimedEnvelope is the envelope a worker runs once it has claimed ref
// with token: the one the claim answered with, the attempt as the
// scheduler stored it (payload, params, job, logical time, timeouts),
// never the message or event that named the attempt, which whoever may
// write to the queue could have altered. The answer must name the attempt
// claimed; when it carries no token, the attempt's is the one the claim
// was made with.
func claimedEnvelope(ref AttemptRef, token string, claimed ClaimResponse) (Envelope, error) {
	if claimed.Envelope == nil {
		return Envelope{}, fmt.Errorf("claim %s: the answer carries no envelope", ref)
	}
	env := *claimed.Envelope
	if env.Ref() != ref {
		return Envelope{}, fmt.Errorf("claim %s: the answer's envelope is attempt %s's", ref, env.Ref())
	}
	if env.Token == "" {
		env.Token = token
	}
	if err := env.Validate(); err != nil {
		return Envelope{}, fmt.Errorf("claim %s: the answer's envelope: %w", ref, err)
	}
	return env, nil
}

// sameJSON reports whether two JSON values are the same text once
// insignificant space is dropped.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// claim claims the attempt, repeating through transient failures with the
// same event id so that a claim that won but lost its answer wins again.
func (w *Worker) claim(ctx context.Context, env Envelope) (ClaimResponse, error) {
	req := ClaimRequest{Run: env.Run, Task: env.Task, Attempt: env.Attempt, WorkerID: w.id, EventID: w.newEventID()}
	bo := backoff{min: 100 * time.Millisecond, max: time.Second}
	for try := 1; ; try++ {
		resp, err := w.api.Claim(ctx, env.Token, req)
		if err == nil || !IsTransient(err) || try == claimTries || !sleep(ctx, bo.next()) {
			return resp, err
		}
	}
}

// runHandler calls the handler and waits for it. It stops waiting when
// the handler's ctx has ended and the handler has had stopWait to return;
// a cancel request has no such limit (the handler may be cleaning up), but
// a shutdown or the invocation deadline still ends the wait. abandonedBy
// says why, when returned is false.
func (w *Worker) runHandler(ctx context.Context, t Task, m mode, log *slog.Logger) (err error, returned bool, abandonedBy *stopCause) {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
				done <- WithCategory(fmt.Errorf("handler panicked: %v", r), CategoryPanic)
			}
		}()
		done <- w.handler(ctx, t)
	}()
	select {
	case err := <-done:
		return err, true, nil
	case <-ctx.Done():
	}
	abandonedBy = causeOf(ctx)
	if abandonedBy == nil {
		abandonedBy = errShutdown
	}
	if abandonedBy == errCancelRequested {
		var deadline <-chan time.Time
		if !m.handlerDeadline.IsZero() {
			timer := time.NewTimer(time.Until(m.handlerDeadline))
			defer timer.Stop()
			deadline = timer.C
		}
		select {
		case err := <-done:
			return err, true, nil
		case <-m.handlerParent.Done():
			abandonedBy = errShutdown
		case <-deadline:
			abandonedBy = errLambdaDeadline
		}
	}
	timer := time.NewTimer(m.stopWait)
	defer timer.Stop()
	select {
	case err := <-done:
		return err, true, nil
	case <-timer.C:
		return nil, false, abandonedBy
	}
}

// causeOf is the stop cause of an ended handler ctx, or nil.
func causeOf(ctx context.Context) *stopCause {
	if ctx.Err() == nil {
		return nil
	}
	var sc *stopCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc
	}
	return nil
}

// fenceLoop ends the handler's ctx (cause ErrLeaseLost) when the lease
// was not renewed and its fencing deadline passed, unless the handler has
// returned already.
func (w *Worker) fenceLoop(ctx context.Context, fence *leaseFence, cancel context.CancelCauseFunc, handlerDone *atomic.Bool, log *slog.Logger) {
	if !fence.watch(ctx, w.after) || handlerDone.Load() {
		return
	}
	fence.markLost()
	log.WarnContext(ctx, "attempt lease not renewed; ending the handler before the lease ends, reporting nothing",
		"lease_expires_at", fence.lease(), "fencing_deadline", fence.deadline())
	cancel(errLeaseLost)
}

// heartbeatLoop beats every interval until ctx ends or the lease is lost,
// renewing the fence with each answer. A cancel request ends the handler's
// ctx; a refusal means the attempt is over for this worker.
func (w *Worker) heartbeatLoop(ctx context.Context, env Envelope, interval time.Duration, fence *leaseFence, cancel context.CancelCauseFunc, handlerDone *atomic.Bool, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	cancelSeen := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if fence.isLost() {
			// The handler was told to stop and nothing will be reported:
			// proving the attempt alive now would only delay its retry.
			return
		}
		callCtx, stop := context.WithTimeout(ctx, max(interval, 5*time.Second))
		sent := w.now()
		resp, err := w.api.Heartbeat(callCtx, env.Token, HeartbeatRequest{Run: env.Run, Task: env.Task, Attempt: env.Attempt, EventID: w.newEventID()})
		stop()
		switch {
		case err == nil:
			fence.renew(sent, resp.LeaseExpiresAt)
			if resp.CancelRequested && !cancelSeen {
				cancelSeen = true
				log.InfoContext(ctx, "cancel requested; ending the handler's context")
				cancel(errCancelRequested)
			}
		case isRefusal(err):
			if handlerDone.Load() {
				// Likely the completion was applied first; nothing to stop.
				log.DebugContext(ctx, "heartbeat refused after the handler returned", "err", err)
			} else {
				log.WarnContext(ctx, "heartbeat refused; the attempt is over for this worker", "err", err)
				cancel(errAttemptOver)
			}
			return
		case ctx.Err() != nil:
			return
		default:
			log.WarnContext(ctx, "heartbeat failed", "err", err)
		}
	}
}

// keepHidden extends the message's visibility every third of the
// visibility timeout, so it is not delivered again while the attempt runs.
func (w *Worker) keepHidden(ctx context.Context, d delivery, log *slog.Logger) {
	t := time.NewTicker(w.cfg.VisibilityTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := w.q.ChangeVisibility(ctx, w.cfg.PoolQueueURL, d.receipt, w.cfg.VisibilityTimeout)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return
		case errors.Is(err, queue.ErrReceiptInvalid) || errors.Is(err, queue.ErrNotInFlight):
			// A redelivery is harmless: its claim is refused.
			log.WarnContext(ctx, "message no longer held; it may be delivered again", "err", err)
			return
		default:
			log.WarnContext(ctx, "message visibility not extended", "err", err)
		}
	}
}

// report completes the attempt through the API's complete route; when
// the route is unreachable (or Config.QueueCompletions says so) it sends
// the completion to the events queue, retrying with backoff until it is
// accepted or ctx ends. Every try carries the same event id. A 4xx answer
// of the route is final: nothing more is sent.
func (w *Worker) report(ctx context.Context, c Completion, log *slog.Logger) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("report %s: %w", c.Ref(), err)
	}
	if !w.cfg.QueueCompletions {
		switch route, err := w.completeOverRoute(ctx, c, log); route {
		case routeDone, routeFinal:
			return nil
		default:
			if ctx.Err() != nil {
				return fmt.Errorf("report %s: %w", c.Ref(), err)
			}
			log.WarnContext(ctx, "complete route unreachable; sending the completion to the events queue", "err", err, "event_id", c.EventID)
		}
	}
	body, err := wire.Marshal(c)
	if err != nil {
		return fmt.Errorf("report %s: %w", c.Ref(), err)
	}
	if err := queue.ValidateMessage(string(body), nil); err != nil {
		return fmt.Errorf("report %s: %w", c.Ref(), err)
	}
	bo := backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	for try := 1; ; try++ {
		_, err := w.events.Send(ctx, string(body), nil)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("report %s (try %d): %w", c.Ref(), try, err)
		}
		wait := bo.next()
		log.WarnContext(ctx, "completion not sent; retrying", "err", err, "try", try, "backoff", wait.String(), "event_id", c.EventID)
		if !sleep(ctx, wait) {
			return fmt.Errorf("report %s (try %d): %w", c.Ref(), try, err)
		}
	}
}

// deleteMessage deletes the delivery's message when the worker owns it.
func (w *Worker) deleteMessage(ctx context.Context, d delivery, log *slog.Logger) {
	if d.receipt == "" || w.cfg.PoolQueueURL == "" {
		return
	}
	err := w.pool.Delete(ctx, d.receipt)
	switch {
	case err == nil:
	case errors.Is(err, queue.ErrReceiptInvalid):
		log.InfoContext(ctx, "message already gone", "err", err)
	default:
		log.WarnContext(ctx, "message not deleted; it will be delivered again and refused", "err", err)
	}
}

// backoff doubles from min to max, each wait drawn from [d/2, d].
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(half+1)
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
