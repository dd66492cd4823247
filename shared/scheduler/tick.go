package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// PassStats counts what one ticker or reconciler pass did.
type PassStats struct {
	Due      int // timers listed
	Handled  int // timers acted on
	Errors   int
	Stopped  bool // stopped early for the deadline
	Duration time.Duration
}

// dispatchGrace is how long timers leave a fresh SCHEDULED instance to
// the path that scheduled it (which dispatches at once), so that the scan,
// the backstop after a crash, does not send a second envelope in the
// ordinary case.
const dispatchGrace = 2 * time.Second

// Tick is the ticker's pass: it materialises due cron and one-off slots,
// dispatches due SCHEDULED instances, fires due retries, re-evaluates
// waiting CREATED instances and backstops live runs and backfills. It reads only the
// sparse timers index, so its cost follows live work, not history.
// Retries due before the next pass (up to retryLookahead ahead) are
// listed now and each fired at its time, so a retry the scan alone
// dispatches (one further away than a delay message reaches) is not a
// ticker period late.
func (s *Service) Tick(ctx context.Context) (PassStats, error) {
	// A run is re-evaluated once per pass, however many of its waiting
	// tasks' re-check timers are due.
	var mu sync.Mutex
	advanced := map[string]bool{}
	lookahead := min(s.cfg.TickerPeriod, retryLookahead)
	return s.ticks.run(ctx, "tick", lookahead, func(ctx context.Context, d ledger.DueTimer) (bool, error) {
		if d.Item == ledger.TimerOfRun || statemodel.TimerKind(d.Kind) == statemodel.TimerDepsRecheck {
			mu.Lock()
			seen := advanced[d.Run]
			advanced[d.Run] = true
			mu.Unlock()
			if seen {
				return false, nil
			}
		}
		switch d.Item {
		case ledger.TimerOfJob:
			return true, s.triggers.FireJob(ctx, d.Job, d.At)
		case ledger.TimerOfRun:
			return true, s.AdvanceRun(ctx, d.Run)
		case ledger.TimerOfBackfill:
			return true, s.triggers.AdvanceBackfill(ctx, d.Backfill)
		}
		switch statemodel.TimerKind(d.Kind) {
		case statemodel.TimerDispatch, statemodel.TimerRetry, statemodel.TimerDepsRecheck:
			return true, s.FireTimer(ctx, d.Instance())
		}
		return false, nil // the reconciler's
	})
}

// Reconcile is the reconciler's pass (runOnce): lease expiry makes a running
// instance LOST, queue and cancel deadlines fire, and LOST instances are
// resolved on evidence or, once the evidence window ends empty, by policy.
// It stops before the context's deadline.
func (s *Service) Reconcile(ctx context.Context) (PassStats, error) {
	return s.reconciles.run(ctx, "reconcile", 0, func(ctx context.Context, d ledger.DueTimer) (bool, error) {
		if d.Item != ledger.TimerOfInstance {
			return false, nil
		}
		switch statemodel.TimerKind(d.Kind) {
		case statemodel.TimerLease, statemodel.TimerQueueTimeout, statemodel.TimerCancel, statemodel.TimerEvidence, statemodel.TimerSignal:
			return true, s.reconcileInstance(ctx, d.Instance(), false)
		}
		return false, nil
	})
}

// Limits of a pass over the timers index.
const (
	// passParallelism bounds the instance and run timers a pass acts on at once:
	// each is a few store calls and a send, independent of the others
	// (and fenced by the store's compare-and-set), so a burst of due
	// retries is dispatched in parallel, not one after another.
	passParallelism = 16
	// retryLookahead is how far ahead of now the ticker lists retries,
	// each then fired at its time; bounded so a pass of a long ticker
	// period does not wait out the period.
	retryLookahead = 2 * time.Second
)

// passState is what the goroutines of one pass share.
type passState struct {
	mu   sync.Mutex
	st   PassStats
	errs []error
	// overdue is, per state, how long ago the most overdue instance timer
	// the pass listed fell due (MetricOverdueInState).
	overdue map[statemodel.InstanceState]time.Duration
}

// timerPass is one kind of pass over the timers index, the ticker's or
// the reconciler's: it counts its passes (a pass starts at the count mod
// tableschema.TimerShards) and lists the due timers with what it was
// given.
type timerPass struct {
	passes atomic.Uint32
	store  interface {
		ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]ledger.DueTimer, string, error)
	}
	now     func() time.Time
	reached func(context.Context) bool // the pass is to stop (Service.deadlineReached)
	log     *slog.Logger
	// owns are the states whose timers this kind of pass acts on; it
	// writes MetricOverdueInState for them.
	owns    []statemodel.InstanceState
	metrics *metrics
}

// newTimerPass builds s's pass of one kind, starting at a random shard:
// instances started together (Lambda cold starts) need not all begin at
// the same one.
func newTimerPass(s *Service, owns ...statemodel.InstanceState) *timerPass {
	p := &timerPass{store: s.store, now: s.now, reached: s.deadlineReached, log: s.log, owns: owns, metrics: s.metrics}
	p.passes.Store(uint32(s.cfg.Random() * tableschema.TimerShards))
	return p
}

// run lists and handles the due timers of every shard. Each pass starts
// shardStride shards further than the previous pass of its kind, so a pass that stops at its deadline in a slow shard leaves the
// other shards to the next passes rather than starving them. Instance and
// run timers are handled up to passParallelism at once (a run's backstops
// fall due together with its retries: runs created together re-arm
// together); job and backfill timers one after another, in the index's
// order. Retries due within
// lookahead of now are listed too, and each handled once due.
func (p *timerPass) run(ctx context.Context, name string, lookahead time.Duration, handle func(context.Context, ledger.DueTimer) (bool, error)) (PassStats, error) {
	start := time.Now()
	now := p.now()
	ps := &passState{overdue: map[statemodel.InstanceState]time.Duration{}}
	sem := make(chan struct{}, passParallelism)
	var wg sync.WaitGroup
	finish := func(stopped bool) (PassStats, error) {
		wg.Wait()
		ps.st.Stopped = stopped
		ps.st.Duration = time.Since(start)
		p.metrics.overdue(p.owns, ps.overdue)
		return ps.st, errors.Join(ps.errs...)
	}
	from := int((p.passes.Add(1)-1)*shardStride) % tableschema.TimerShards
	until := now.Add(lookahead)
	firsts := p.firstDuePages(ctx, until)
	for i := range tableschema.TimerShards {
		shard := (from + i) % tableschema.TimerShards
		token := ""
		for page := 0; ; page++ {
			if p.reached(ctx) {
				return finish(true)
			}
			var due []ledger.DueTimer
			var next string
			var err error
			if page == 0 {
				due, next, err = firsts[shard].due, firsts[shard].next, firsts[shard].err
			} else {
				due, next, err = p.store.ListDueTimers(ctx, shard, until, ledger.MaxListLimit, token)
			}
			if err != nil {
				ps.fail(err)
				break
			}
			for _, d := range due {
				if p.reached(ctx) {
					break
				}
				early := d.At.After(now)
				if early && (d.Item != ledger.TimerOfInstance || statemodel.TimerKind(d.Kind) != statemodel.TimerRetry) {
					continue // not due; the next pass's
				}
				ps.listed(d, now)
				if d.Item == ledger.TimerOfJob || d.Item == ledger.TimerOfBackfill {
					p.handle(ctx, name, ps, handle, d)
					continue
				}
				if early {
					// It takes a slot once due: waiting holds none.
					wg.Go(func() {
						if sleepUntil(ctx, p.now, d.At) {
							sem <- struct{}{}
							defer func() { <-sem }()
							p.handle(ctx, name, ps, handle, d)
						}
					})
					continue
				}
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					p.handle(ctx, name, ps, handle, d)
				})
			}
			if next == "" {
				break
			}
			token = next
		}
	}
	return finish(false)
}

// handle hands one due timer to the pass's handler and counts it.
func (p *timerPass) handle(ctx context.Context, name string, ps *passState, handle func(context.Context, ledger.DueTimer) (bool, error), d ledger.DueTimer) {
	acted, err := handle(ctx, d)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if acted {
		ps.st.Handled++
	}
	if err != nil {
		ps.st.Errors++
		p.log.WarnContext(ctx, name+" timer", "item", string(d.Item), "job", d.Job, "run_id", d.Run, "task", d.Task, "kind", d.Kind, "error", err.Error())
		if transient(err) {
			ps.errs = append(ps.errs, err)
		}
	}
}

// listed counts a due timer listed at now and, for an instance's, how
// long it has been due.
func (ps *passState) listed(d ledger.DueTimer, now time.Time) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.st.Due++
	if d.Item != ledger.TimerOfInstance {
		return
	}
	if st := statemodel.TimerKind(d.Kind).State(); st != statemodel.StateNone {
		ps.overdue[st] = max(ps.overdue[st], now.Sub(d.At))
	}
}

func (ps *passState) fail(err error) {
	ps.mu.Lock()
	ps.errs = append(ps.errs, err)
	ps.st.Errors++
	ps.mu.Unlock()
}

// sleepUntil waits until at by the clock now (real time paces the wait),
// or until ctx ends; it reports whether at came.
func sleepUntil(ctx context.Context, now func() time.Time, at time.Time) bool {
	wait := at.Sub(now())
	if wait <= 0 {
		return true
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// shardStride is how far each pass starts from the previous one's first
// shard: odd, so the passes start at every shard in turn, and large, so
// that consecutive passes start far apart on a ring of sparse shards.
const shardStride = 157

// duePage is the first page of one shard's due timers.
type duePage struct {
	due  []ledger.DueTimer
	next string
	err  error
}

// shardReaders is how many shards a pass lists at once.
const shardReaders = 16

// firstDuePages lists the first page of every timer shard's due timers,
// shardReaders shards at once: a pass reads many shards (they keep each
// index partition under its write limit), and one after the other they
// would take that many round trips.
func (p *timerPass) firstDuePages(ctx context.Context, until time.Time) []duePage {
	out := make([]duePage, tableschema.TimerShards)
	shards := make(chan int)
	var wg sync.WaitGroup
	for range shardReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for shard := range shards {
				page := &out[shard]
				page.due, page.next, page.err = p.store.ListDueTimers(ctx, shard, until, ledger.MaxListLimit, "")
			}
		}()
	}
	for shard := range tableschema.TimerShards {
		shards <- shard
	}
	close(shards)
	wg.Wait()
	return out
}

// FireTimer acts on one instance whose timer may be due: a due retry
// becomes SCHEDULED and is dispatched, a SCHEDULED instance is dispatched, a
// CREATED one has its dependencies re-evaluated; the other timers are the
// reconciler's. A timer that is not due yet (an early delay message) waits
// out the sub-second rest, so short timers fire on time.
func (s *Service) FireTimer(ctx context.Context, key ledger.InstanceKey) error {
	inst, err := s.store.GetInstance(ctx, key)
	if err != nil {
		return fmt.Errorf("fire timer %s: %w", key, err)
	}
	snap := inst.Snapshot
	switch snap.State {
	case statemodel.StateUpForRetry:
		if due, err := s.waitDue(ctx, snap.RetryAt); !due {
			return err
		}
		ev := statemodel.Event{ID: fmt.Sprintf("retry:%d", snap.Attempt), Type: statemodel.EvRetryDue, Actor: statemodel.ActorScheduler}
		res, err := s.store.TransitionFrom(ctx, inst, ev, s.now(), s.policy())
		if err != nil {
			if transient(err) {
				return err
			}
			return nil
		}
		s.follow(ctx, res)
	case statemodel.StateScheduled:
		// Whatever timer brought us here (the index may still list the
		// retry that just became SCHEDULED), a fresh SCHEDULED instance
		// is being dispatched by the path that scheduled it.
		if s.now().Sub(snap.Deadline) < dispatchGrace {
			return nil
		}
		run, err := s.store.GetRun(ctx, key.Run)
		if err != nil {
			return fmt.Errorf("fire timer %s: %w", key, err)
		}
		if held, err := s.flow.HeldByLimiter(ctx, run); held || err != nil {
			return err // its run waits in a limiter (flow/retry.go)
		}
		_, err = s.dispatch(ctx, inst, run)
		return err
	case statemodel.StateCreated:
		return s.AdvanceRun(ctx, key.Run)
	default:
		return s.reconcileInstance(ctx, key, false)
	}
	return nil
}

// fireRunTimer acts on a delay message for a run's timer (a message
// without a task): the run is advanced at the message's time, which an
// early message waits out as FireTimer's do.
func (s *Service) fireRunTimer(ctx context.Context, runID string, at time.Time) error {
	if due, err := s.waitDue(ctx, at); !due {
		return err
	}
	return s.AdvanceRun(ctx, runID)
}

// waitDue waits until at when it is at most a second away (a delay
// message comes up to half a second early: SQS delays are whole
// seconds), and reports whether at has come; one further away is not
// ours yet: the scan or a later message acts on it.
func (s *Service) waitDue(ctx context.Context, at time.Time) (bool, error) {
	if at.Sub(s.now()) > time.Second {
		return false, nil
	}
	if !sleepUntil(ctx, s.now, at) {
		return false, ctx.Err()
	}
	return true, nil
}

// TickerStates are the states whose timers the ticker acts on (Tick), and
// ReconcilerStates the reconciler's (Reconcile): between them every state
// with a timer, each once.
func TickerStates() []statemodel.InstanceState {
	return []statemodel.InstanceState{statemodel.StateCreated, statemodel.StateScheduled, statemodel.StateUpForRetry}
}

// ReconcilerStates: see TickerStates.
func ReconcilerStates() []statemodel.InstanceState {
	return []statemodel.InstanceState{statemodel.StateQueued, statemodel.StateRunning, statemodel.StateLost, statemodel.StateCancelling}
}
