package statemodel

import "time"

// AttemptMetrics are one attempt's phases, from transition times only.
// A nil duration is a phase that has not happened (or not ended) yet.
type AttemptMetrics struct {
	N         int
	QueueWait *time.Duration // RUNNING - QUEUED
	RunTime   *time.Duration // end - RUNNING
}

// Metrics are an instance's phases. They never come from created/updated
// columns: "RUNNING for 21 minutes" must not hide 20 minutes of queue wait.
type Metrics struct {
	DependencyWait *time.Duration // SCHEDULED - CREATED
	Attempts       []AttemptMetrics
}

// Latest returns the metrics of the latest attempt (zero value if none).
func (m Metrics) Latest() AttemptMetrics {
	if len(m.Attempts) == 0 {
		return AttemptMetrics{}
	}
	return m.Attempts[len(m.Attempts)-1]
}

func span(from, to time.Time) *time.Duration {
	if from.IsZero() || to.IsZero() {
		return nil
	}
	d := to.Sub(from)
	return &d
}

// Metrics returns the attempt's phases; its times are the ObservedAt of the
// transitions that set them.
func (a AttemptRecord) Metrics() AttemptMetrics {
	return AttemptMetrics{N: a.N, QueueWait: span(a.QueuedAt, a.StartedAt), RunTime: span(a.StartedAt, a.EndedAt)}
}

// Metrics returns the instance's phases from the transition times that the
// snapshot holds: the attempts it holds are the latest MaxInlineAttempts,
// the latest of all included (MetricsOf reads every attempt from history).
func (s Snapshot) Metrics() Metrics {
	m := Metrics{DependencyWait: span(s.CreatedAt, s.ScheduledAt)}
	for _, a := range s.Attempts {
		m.Attempts = append(m.Attempts, a.Metrics())
	}
	return m
}

// MetricsOf computes the same phases from a history alone.
func MetricsOf(history []Transition) Metrics {
	var created, scheduled time.Time
	var attempts []AttemptMetrics
	type phase struct{ queued, started, ended time.Time }
	var ph []phase
	for _, tr := range history {
		switch {
		case tr.From == StateNone:
			created = tr.ObservedAt
		case tr.To == StateScheduled && scheduled.IsZero():
			scheduled = tr.ObservedAt
		}
		if a := tr.AttemptRecord; a != nil {
			for len(ph) < a.N {
				ph = append(ph, phase{})
			}
			p := &ph[a.N-1]
			switch {
			case tr.Event == EvDispatched:
				p.queued = tr.ObservedAt
			case tr.Event == EvStarted:
				p.started = tr.ObservedAt
			case !a.EndedAt.IsZero() && p.ended.IsZero():
				p.ended = tr.ObservedAt
			}
		}
	}
	for i, p := range ph {
		attempts = append(attempts, AttemptMetrics{N: i + 1, QueueWait: span(p.queued, p.started), RunTime: span(p.started, p.ended)})
	}
	return Metrics{DependencyWait: span(created, scheduled), Attempts: attempts}
}

// Lag is how long after the event happened (its EventTime, by its
// reporter's clock) the transition was written (ObservedAt): the
// state-update lag. false when the record has no event time. A reporter
// whose clock runs ahead of ours gives a negative difference; it reads as
// 0, since no event is written before it happened.
func (t Transition) Lag() (time.Duration, bool) {
	if t.EventTime.IsZero() || t.ObservedAt.IsZero() {
		return 0, false
	}
	return max(t.ObservedAt.Sub(t.EventTime), 0), true
}

// State is the state an instance holding a timer of kind k is in (Timer's
// rule read backwards); "" for TimerNone or an unknown kind.
func (k TimerKind) State() InstanceState {
	switch k {
	case TimerDepsRecheck:
		return StateCreated
	case TimerDispatch:
		return StateScheduled
	case TimerQueueTimeout:
		return StateQueued
	case TimerLease, TimerSignal:
		return StateRunning
	case TimerRetry:
		return StateUpForRetry
	case TimerEvidence:
		return StateLost
	case TimerCancel:
		return StateCancelling
	}
	return StateNone
}
