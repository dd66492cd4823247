package statemodel

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Jitter names how randomness spreads retry times.
type Jitter string

const (
	// JitterFull draws the delay uniformly from [0, backoff): retries of
	// many instances that failed together do not fail together again.
	JitterFull Jitter = "full"
	// JitterNone uses the backoff as computed.
	JitterNone Jitter = "none"
)

// RetryPolicy bounds and spaces attempts.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts that spend budget, the
	// first one included. Never-started resubmits do not spend it.
	MaxAttempts        int
	InitialInterval    time.Duration
	BackoffCoefficient float64
	MaxInterval        time.Duration
	Jitter             Jitter
	// Intervals, when set, replace the exponential backoff: the wait
	// before attempt n+1 is Intervals[n-1], the last one repeating
	// (InitialInterval, BackoffCoefficient and MaxInterval then unused).
	Intervals []time.Duration
}

// Timeouts bound the phases of an attempt, each for exactly one thing.
type Timeouts struct {
	// Queue bounds schedule-to-start: QUEUED until a worker claims it.
	Queue time.Duration
	// Run bounds start-to-close; the worker SDK cancels its context then.
	Run time.Duration
	// Heartbeat is the longest allowed gap between heartbeats (the lease).
	Heartbeat time.Duration
	// Cancel bounds CANCELLING: how long a worker has to acknowledge.
	Cancel time.Duration
}

// Policy is everything Apply needs besides the snapshot, the event and now.
type Policy struct {
	Retry    RetryPolicy
	Timeouts Timeouts
	// EvidenceWindow is how long a LOST instance waits for evidence before
	// the retry policy decides with error category lost.
	EvidenceWindow time.Duration
	// MaxResubmits bounds never-started resubmits, which spend no budget.
	MaxResubmits int
	// DepsRecheck is the backstop timer of CREATED: dependencies are
	// re-evaluated then even if no upstream completion woke the instance.
	DepsRecheck time.Duration
	// Random draws jitter from [0, 1). Nil means no draw (factor 1), which
	// keeps tests and the model check deterministic.
	Random func() float64
}

// DefaultPolicy is what a job gets for every field it leaves out.
func DefaultPolicy() Policy {
	return Policy{
		Retry: RetryPolicy{
			MaxAttempts:        3,
			InitialInterval:    10 * time.Second,
			BackoffCoefficient: 2,
			MaxInterval:        10 * time.Minute,
			Jitter:             JitterFull,
		},
		Timeouts: Timeouts{
			Queue:     10 * time.Minute,
			Run:       time.Hour,
			Heartbeat: 60 * time.Second,
			Cancel:    2 * time.Minute,
		},
		EvidenceWindow: 5 * time.Minute,
		MaxResubmits:   3,
		DepsRecheck:    time.Minute,
	}
}

// ErrInvalidPolicy marks a policy that cannot be used.
var ErrInvalidPolicy = errors.New("invalid policy")

// Validate checks the policy's fields, naming the first bad one.
func (p Policy) Validate() error {
	bad := func(field, why string) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidPolicy, field, why)
	}
	r := p.Retry
	switch {
	case r.MaxAttempts < 1:
		return bad("retry.max_attempts", "must be at least 1")
	case r.InitialInterval < 0:
		return bad("retry.initial_interval", "must not be negative")
	case r.BackoffCoefficient < 1:
		return bad("retry.backoff_coefficient", "must be at least 1")
	case r.MaxInterval < r.InitialInterval:
		return bad("retry.max_interval", "must be at least the initial interval")
	case r.Jitter != JitterFull && r.Jitter != JitterNone:
		return bad("retry.jitter", `must be "full" or "none"`)
	case slices.ContainsFunc(r.Intervals, func(d time.Duration) bool { return d <= 0 }):
		return bad("retry.intervals", "must all be positive")
	case p.Timeouts.Queue <= 0, p.Timeouts.Run <= 0, p.Timeouts.Heartbeat <= 0, p.Timeouts.Cancel <= 0:
		return bad("timeouts", "must all be positive")
	case p.EvidenceWindow < 0:
		return bad("evidence_window", "must not be negative")
	case p.MaxResubmits < 0:
		return bad("max_resubmits", "must not be negative")
	case p.DepsRecheck <= 0:
		return bad("deps_recheck", "must be positive")
	}
	return nil
}

// Equal reports whether r and o are the same policy.
func (r RetryPolicy) Equal(o RetryPolicy) bool {
	return r.MaxAttempts == o.MaxAttempts && r.InitialInterval == o.InitialInterval &&
		r.BackoffCoefficient == o.BackoffCoefficient && r.MaxInterval == o.MaxInterval &&
		r.Jitter == o.Jitter && slices.Equal(r.Intervals, o.Intervals)
}

// Backoff returns the delay before the retry that follows the failed-th
// budget-spending failure (1 for the first): Intervals[n-1] (the last one
// repeating) when the policy lists intervals, else initial *
// coefficient^(n-1) capped at MaxInterval; then jittered. r is a draw from
// [0, 1) used only by full jitter.
func (r RetryPolicy) Backoff(failed int, draw float64) time.Duration {
	if failed < 1 {
		failed = 1
	}
	var d float64
	if len(r.Intervals) > 0 {
		d = float64(r.Intervals[min(failed, len(r.Intervals))-1])
	} else {
		d = float64(r.InitialInterval) * math.Pow(r.BackoffCoefficient, float64(failed-1))
		if d > float64(r.MaxInterval) || math.IsInf(d, 0) || math.IsNaN(d) {
			d = float64(r.MaxInterval)
		}
	}
	if r.Jitter == JitterFull {
		if draw < 0 {
			draw = 0
		}
		if draw > 1 {
			draw = 1
		}
		d *= draw
	}
	return time.Duration(d)
}

func (p Policy) draw() float64 {
	if p.Random == nil {
		return 1
	}
	return p.Random()
}
