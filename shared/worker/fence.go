package worker

import (
	"context"
	"sync"
	"time"
)

// ErrLeaseLost is the cause of a handler's ctx when the worker could not
// renew the attempt's lease and too little of it was left: the worker stops
// the handler before the lease ends, so that the handler never runs beside
// a retry of its attempt, and reports nothing for the attempt (the
// scheduler resolves it as lost). Test with errors.Is(context.Cause(ctx),
// worker.ErrLeaseLost).
var ErrLeaseLost error = errLeaseLost

// MaxFenceMargin bounds how long before the lease's end the worker stops a
// handler whose lease it could not renew. The margin is the smaller of this
// and a third of the heartbeat timeout (one heartbeat interval).
const MaxFenceMargin = 5 * time.Second

// leaseFence is what the worker knows of one attempt's lease: when it ends
// and when the handler must therefore stop. Times are by the worker's clock.
//
// The lease's end is the earlier of two estimates: the lease_expires_at the
// API answered, and the time the renewing call was sent plus the heartbeat
// timeout. The server computed its expiry from a moment after the call was
// sent, so the second estimate never lies late, whatever the clocks say;
// the first holds as long as the clocks agree.
type leaseFence struct {
	now func() time.Time
	// timeout is the heartbeat timeout: three heartbeat intervals.
	timeout time.Duration
	// margin is min(MaxFenceMargin, timeout/3).
	margin time.Duration

	mu       sync.Mutex
	leaseEnd time.Time
	lost     bool
	// renewed wakes the watcher when the lease moved.
	renewed chan struct{}
}

// newLeaseFence tracks the lease of an attempt whose heartbeat interval is
// interval (a third of the heartbeat timeout, as the envelope says).
func newLeaseFence(now func() time.Time, interval time.Duration) *leaseFence {
	return &leaseFence{
		now:     now,
		timeout: LeaseLifetime * interval,
		margin:  min(MaxFenceMargin, interval),
		renewed: make(chan struct{}, 1),
	}
}

// renew records a renewal (the claim or a heartbeat) sent at sentAt and
// answered with the lease's end expiresAt (zero when the answer had none).
func (f *leaseFence) renew(sentAt, expiresAt time.Time) {
	end := sentAt.Add(f.timeout)
	if !expiresAt.IsZero() && expiresAt.Before(end) {
		end = expiresAt
	}
	f.mu.Lock()
	f.leaseEnd = end
	f.mu.Unlock()
	select {
	case f.renewed <- struct{}{}:
	default:
	}
}

// deadline is when the handler must have stopped unless the lease is
// renewed first: the lease's end minus the margin.
func (f *leaseFence) deadline() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leaseEnd.Add(-f.margin)
}

// lease is the lease's end as last renewed.
func (f *leaseFence) lease() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leaseEnd
}

// markLost records that the deadline passed: the lease is not renewed any
// more.
func (f *leaseFence) markLost() {
	f.mu.Lock()
	f.lost = true
	f.mu.Unlock()
}

func (f *leaseFence) isLost() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost
}

// watch waits until the deadline passes without a renewal (true) or ctx
// ends (false). after makes the timers; the clock is f.now, so a test can
// drive both.
func (f *leaseFence) watch(ctx context.Context, after func(time.Duration) <-chan time.Time) bool {
	for {
		wait := f.deadline().Sub(f.now())
		if wait <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-f.renewed:
		case <-after(wait):
		}
	}
}

// realAfter is the timer source outside tests.
func realAfter(d time.Duration) <-chan time.Time { return time.After(d) }
