package scheduler

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// armingStore is the Service's store: the ledger, with every instance
// write followed by a delay message for the timer it set when the timers
// index does not hold it (ledger.IndexedTimer: a timer within
// ledger.TimerHorizon of its write). Every room writes instances through
// it, so no write's short timer is left without its message; the run's
// backstop (fireDueTimers) is the net under a lost one.
type armingStore struct {
	ledger.Store
	s *Service
}

func (a armingStore) Transition(ctx context.Context, key ledger.InstanceKey, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	res, err := a.Store.Transition(ctx, key, e, now, p)
	a.armWritten(ctx, res, err)
	return res, err
}

func (a armingStore) TransitionFrom(ctx context.Context, held ledger.Instance, e statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	res, err := a.Store.TransitionFrom(ctx, held, e, now, p)
	a.armWritten(ctx, res, err)
	return res, err
}

func (a armingStore) TransitionAll(ctx context.Context, held ledger.Instance, events []statemodel.Event, now time.Time, p statemodel.Policy) (ledger.Result, error) {
	res, err := a.Store.TransitionAll(ctx, held, events, now, p)
	a.armWritten(ctx, res, err)
	return res, err
}

// armWritten arms the delay message of the timer a transition wrote, when
// it wrote one the index does not hold. A heartbeat's renewal (Refreshed)
// arms nothing: the lease's message, armed at the claim, finds the lease
// extended and arms the next one itself (reconcileInstance), so a lease
// costs one message per lease period, not one per heartbeat.
func (a armingStore) armWritten(ctx context.Context, res ledger.Result, err error) {
	if err != nil || (res.Outcome != statemodel.Applied && !res.Stopped) {
		return
	}
	delays{a.s}.armShort(ctx, res.Instance)
}

// delays sends the service's delay messages: the timers a delay message
// carries (within ledger.MaxTimerDelay) instead of the index's scan.
type delays struct{ s *Service }

// armShort sends the delay message of inst's timer when the timers
// index does not hold it. A SCHEDULED instance's message comes
// dispatchGrace after its time, when the path that scheduled it has had
// its turn to dispatch it.
func (d delays) armShort(ctx context.Context, inst ledger.Instance) {
	at, kind := inst.Snapshot.Timer()
	if kind == statemodel.TimerNone || at.IsZero() || !inst.TimerAt.IsZero() {
		return
	}
	if kind == statemodel.TimerDispatch {
		at = at.Add(dispatchGrace)
	}
	d.send(ctx, protocol.Timer{Run: inst.Key.Run, Task: inst.Key.Task, At: at, Purpose: string(kind)})
}

// arm sends a delay message so that a timer fires on time instead
// of on the next scan or backstop. A lost delay message costs precision,
// never correctness: the index's scan or the run's backstop finds the
// timer.
func (d delays) arm(ctx context.Context, key ledger.InstanceKey, at time.Time) {
	d.send(ctx, protocol.Timer{Run: key.Run, Task: key.Task, At: at})
}

// send sends t on the delay queue, unless it is further off than a
// delay message reaches.
func (d delays) send(ctx context.Context, t protocol.Timer) {
	s := d.s
	if s.cfg.DelayQueueURL == "" {
		return
	}
	delay := t.At.Sub(s.now())
	if delay > ledger.MaxTimerDelay {
		return
	}
	delay = max(delay, 0)
	body, _ := wire.Marshal(t)
	if _, err := s.queue.SendDelayed(ctx, s.cfg.DelayQueueURL, string(body), nil, delay.Round(time.Second)); err != nil {
		s.log.WarnContext(ctx, "arm timer", "run_id", t.Run, "task", t.Task, "error", err.Error())
	}
}

// fireDueTimers is the run's backstop for its instances' short timers:
// every instance of view whose timer is due and not in the timers index
// (its delay message was lost, or its send failed) is acted on as its
// message would have been. The view is the one the run's advance read,
// so this costs no read unless a timer is due. CREATED tasks' re-checks
// are left out: the advance that read view evaluated them.
func (s *Service) fireDueTimers(ctx context.Context, view ledger.RunView) {
	now := s.now()
	for _, t := range view.Tasks {
		inst := t.Instance
		at, kind := inst.Snapshot.Timer()
		if kind == statemodel.TimerNone || kind == statemodel.TimerDepsRecheck || at.IsZero() || !inst.TimerAt.IsZero() {
			continue
		}
		if kind == statemodel.TimerDispatch {
			at = at.Add(dispatchGrace)
		}
		if at.After(now) {
			continue
		}
		if err := s.FireTimer(ctx, inst.Key); err != nil {
			s.log.WarnContext(ctx, "backstop timer", "run_id", inst.Key.Run, "task", inst.Key.Task, "kind", string(kind), "error", err.Error())
		}
	}
}
