package scheduler

import (
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// SpanSink is told of what a run's trace shows, by the process that
// records it: a run created (its trace id, for the attempts that end in
// this process), an attempt ended (claim, or queueing for one never
// claimed, to its end) and a run ended (creation to end). The span ids
// are derived from the names (protocol.RunSpanID, AttemptSpanID), so no
// span state is stored. Calls are made in the path that applies a write:
// a sink must not block (the OTLP exporter, shared/tracing, hands them
// to its own goroutine).
type SpanSink interface {
	RunCreated(run ledger.Run)
	AttemptEnded(end AttemptEnd)
	RunEnded(run ledger.Run)
}

// AttemptEnd is one attempt as the transition that ended it left it.
type AttemptEnd struct {
	Job     string
	Key     ledger.InstanceKey
	Attempt statemodel.AttemptRecord
}

// attemptEnded reports an attempt that tr ended to spans (nil: none). The
// record's end is set by the one transition that ends the attempt and is
// never moved after: a transition that carries an ended record is that
// one.
func attemptEnded(spans SpanSink, inst ledger.Instance, tr statemodel.Transition) {
	if spans == nil || tr.AttemptRecord == nil || tr.AttemptRecord.EndedAt.IsZero() {
		return
	}
	spans.AttemptEnded(AttemptEnd{Job: inst.Job, Key: inst.Key, Attempt: *tr.AttemptRecord})
}
