package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Handler runs one attempt. ctx ends when the attempt must stop: a cancel
// request from an operator, the run timeout, a newer attempt superseding
// this one, the end of a graceful shutdown's grace period, or the Lambda
// deadline. A handler that stops because ctx ended should return ctx.Err()
// (or an error wrapping it).
//
// A nil error reports success. Any other error reports failure, retryable
// unless wrapped with Permanent, with the category set by WithCategory
// ("error" by default) and the exit code set by WithExitCode.
type Handler func(ctx context.Context, t Task) error

// Task is one claimed attempt as the handler sees it.
type Task struct {
	// Job is the job the run belongs to ("" from an envelope without it).
	Job     string
	Run     string
	Task    string
	Attempt int
	// LogicalTime is the run's logical time (the schedule slot, or the
	// trigger time of a manual run); zero when the envelope has none.
	LogicalTime time.Time
	// Token is the attempt's fencing token. Output writes keyed on (Run,
	// Task, Attempt) and conditioned on the token let only the current
	// attempt's output stand: a stale attempt that still runs cannot
	// overwrite what its successor wrote. Where the output goes to
	// DynamoDB, Fence does more, with no clock: see Task.Fence.
	Token string
	Pool  string
	// Payload is the task's effective payload; nil when the job has none.
	Payload json.RawMessage
	// Params are the run's parameters (a JSON object); nil when none.
	Params json.RawMessage
	// WorkerID is the id the claim carried: "<name>@<boot_id>".
	WorkerID string
	// Log carries run_id, task_id and attempt.
	Log *slog.Logger

	out   *taskOutput
	fence *leaseFence
	// inputs, item, index and commitFence come from the claim answer's
	// envelope.
	inputs      map[string]json.RawMessage
	item        json.RawMessage
	index       *int
	commitFence *Fence
}

// FencingDeadline is when, by the worker's clock (Config.Clock), the worker
// ends the handler's ctx with cause ErrLeaseLost unless it renews the
// attempt's lease before then: the lease's end less a margin of
// min(5 s, heartbeat timeout / 3). It moves on with every heartbeat. An
// output write that is refused after it (a conditional write whose
// condition carries the deadline, a commit that checks it last) cannot
// land beside a retry of the attempt, as long as the clocks of the worker
// and the scheduler agree within the deployment's max clock skew. Zero for
// a task not handed out by a worker.
func (t Task) FencingDeadline() time.Time {
	if t.fence == nil {
		return time.Time{}
	}
	return t.fence.deadline()
}

// Ref is the attempt.
func (t Task) Ref() AttemptRef { return AttemptRef{Run: t.Run, Task: t.Task, Attempt: t.Attempt} }

// DecodePayload unmarshals the payload into v.
func (t Task) DecodePayload(v any) error {
	if len(t.Payload) == 0 {
		return fmt.Errorf("decode payload of %s: no payload", t.Ref())
	}
	if err := json.Unmarshal(t.Payload, v); err != nil {
		return fmt.Errorf("decode payload of %s: %w", t.Ref(), err)
	}
	return nil
}

// DecodeParams unmarshals the run's parameters into v.
func (t Task) DecodeParams(v any) error {
	if len(t.Params) == 0 {
		return fmt.Errorf("decode params of %s: no params", t.Ref())
	}
	if err := json.Unmarshal(t.Params, v); err != nil {
		return fmt.Errorf("decode params of %s: %w", t.Ref(), err)
	}
	return nil
}

// SetOutputRef records where the attempt's output lives (a URI, a key);
// the completion reports the last value set. It refuses a reference over
// MaxOutputRefBytes or with characters a queue message cannot carry. Safe
// to call from any goroutine.
func (t Task) SetOutputRef(ref string) error {
	if err := CheckReportFields(ref, "", ""); err != nil {
		return fmt.Errorf("set output ref of %s: %w", t.Ref(), err)
	}
	if t.out == nil {
		return fmt.Errorf("set output ref of %s: the task was not handed out by a worker", t.Ref())
	}
	t.out.mu.Lock()
	t.out.ref = ref
	t.out.mu.Unlock()
	return nil
}

type taskOutput struct {
	mu     sync.Mutex
	ref    string
	output json.RawMessage
}

func (o *taskOutput) get() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ref
}

// Permanent marks err as not worth retrying: the completion says
// retryable false. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// WithCategory sets the completion's error_category (snake_case). The
// outermost WithCategory wins. WithCategory(nil, ...) is nil.
func WithCategory(err error, category string) error {
	if err == nil {
		return nil
	}
	return &categoryError{err: err, category: category}
}

// WithExitCode sets the completion's exit_code. The outermost WithExitCode
// wins. WithExitCode(nil, ...) is nil.
func WithExitCode(err error, code int) error {
	if err == nil {
		return nil
	}
	return &exitCodeError{err: err, code: code}
}

// WithReason sets the completion's reason, the words an operator reads in
// the instance's history (for a process, the tail of its error output).
// Without it a failure's reason is the error's text. Either is clipped to
// its last MaxReasonBytes. The outermost WithReason wins. WithReason(nil,
// ...) is nil.
func WithReason(err error, reason string) error {
	if err == nil {
		return nil
	}
	return &reasonError{err: err, reason: reason}
}

type reasonError struct {
	err    error
	reason string
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// Reason is the reason a failed attempt's completion carries: the one set
// with WithReason, else err's text, clipped by ClipReason; "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var r *reasonError
	if errors.As(err, &r) {
		return ClipReason(r.reason)
	}
	return ClipReason(err.Error())
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type categoryError struct {
	err      error
	category string
}

func (e *categoryError) Error() string { return e.err.Error() }
func (e *categoryError) Unwrap() error { return e.err }

type exitCodeError struct {
	err  error
	code int
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Category is the error_category set on err with WithCategory, or "".
func Category(err error) string {
	var c *categoryError
	if errors.As(err, &c) {
		return c.category
	}
	return ""
}

// ExitCode is the exit code set on err with WithExitCode.
func ExitCode(err error) (int, bool) {
	var e *exitCodeError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}

// stopCause says why the worker ended a handler's context. It is the
// context's cause, so the outcome can tell a cancel request from a timeout.
type stopCause struct {
	reason   string
	category string
	outcome  Outcome
	// silent: the attempt is over for this worker and nothing may be
	// reported for it.
	silent bool
}

func (c *stopCause) Error() string { return c.reason }

var (
	errCancelRequested = &stopCause{reason: "cancel requested", category: CategoryCancelled, outcome: OutcomeCancelled}
	errRunTimeout      = &stopCause{reason: "run timeout passed", category: CategoryTimeout, outcome: OutcomeFailed}
	errShutdown        = &stopCause{reason: "worker shutting down", category: CategoryWorkerShutdown, outcome: OutcomeFailed}
	errLambdaDeadline  = &stopCause{reason: "invocation deadline near", category: CategoryWorkerDeadline, outcome: OutcomeFailed}
	// errAttemptOver: a heartbeat learned that the attempt is no longer
	// current (stale, or its instance refuses it). Nothing is reported.
	errAttemptOver = &stopCause{reason: "attempt no longer current", silent: true}
	// errLeaseLost (exported as ErrLeaseLost): the lease could not be
	// renewed and is about to end. Nothing is reported: the scheduler
	// resolves the attempt as lost.
	errLeaseLost = &stopCause{reason: "attempt lease not renewed before its end", silent: true}
)

// result is how one handler call ended, before it becomes a completion.
type result struct {
	outcome   Outcome
	category  string
	retryable bool
	exitCode  *int
	// report is false when the attempt is over for this worker and no
	// completion may be sent.
	report bool
}

// classify turns a handler's return into a result. cause is the handler
// context's cause when the worker ended it, else nil.
func classify(ctx context.Context, err error, cause *stopCause, log *slog.Logger) result {
	if cause != nil && cause.silent {
		return result{report: false}
	}
	if err == nil {
		// Work that finished is the truth, even after a cancel request or
		// past a timeout: the API lets it win over CANCELLING.
		return result{outcome: OutcomeSucceeded, retryable: true, report: true}
	}
	r := result{outcome: OutcomeFailed, category: CategoryError, retryable: !IsPermanent(err), report: true}
	if code, ok := ExitCode(err); ok {
		r.exitCode = &code
	}
	category := Category(err)
	if cause != nil {
		stopped := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, cause)
		switch {
		case cause == errCancelRequested && stopped:
			// The acknowledgement of the cancel request.
			return result{outcome: OutcomeCancelled, category: CategoryCancelled, retryable: false, exitCode: r.exitCode, report: true}
		case cause != errCancelRequested && (stopped || category == ""):
			// The worker stopped the work (timeout, shutdown, deadline);
			// an error the handler did not categorise is taken as that.
			r.outcome, r.category = cause.outcome, cause.category
			return r
		}
	}
	if category != "" {
		if CheckReportFields("", category, "") == nil {
			r.category = category
		} else {
			log.WarnContext(ctx, "handler error category is not snake_case of at most 64 characters; reporting \"error\"", "category", category)
		}
	}
	return r
}
