package statemodel

// ExecutorSignal is the executor type of a signal task: no worker runs its
// attempts. The scheduler starts an attempt as soon as it is dispatched
// (signal.requested: QUEUED -> RUNNING, actor scheduler, no lease), a
// person or an outside system settles it (signal.succeeded or
// signal.failed, actor operator) and its only timer is the run timeout
// (signal.timeout). Worker events, lease expiry and so LOST never apply
// to it.
const ExecutorSignal = "signal"

// Signal reports whether the attempt is a signal task's.
func (a AttemptRecord) Signal() bool { return a.Executor == ExecutorSignal }

// SignalAttempt reports whether the current attempt is a signal task's.
func (s Snapshot) SignalAttempt() bool {
	cur, ok := s.Current()
	return ok && cur.Signal()
}

// signalEvent reports whether events of type t belong to signal attempts
// only.
func signalEvent(t EventType) bool {
	switch t {
	case EvSignalRequested, EvSignalSucceeded, EvSignalFailed, EvSignalTimeout:
		return true
	}
	return false
}

// signalRefusal is the refusal of an event that does not fit the kind of
// the current attempt: a signal event on an attempt a worker runs, or a
// worker's or the lease's event on a signal attempt (whose token a worker
// route must not accept). "" when the event fits.
func signalRefusal(s Snapshot, e Event) string {
	if s.Attempt < 1 || (!e.Type.Fenced() && e.Type != EvSignalRequested) {
		return ""
	}
	sig := s.SignalAttempt()
	switch {
	case signalEvent(e.Type) && !sig:
		return "the current attempt is not a signal task's"
	case sig && (e.Actor == ActorWorker || e.Type == EvLeaseExpired || e.Type == EvCancelTimeout):
		return "a signal task's attempt is settled by a signal or its run timeout, not by a worker or a lease"
	}
	return ""
}
