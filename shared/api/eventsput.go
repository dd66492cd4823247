package api

import (
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/triggers"
)

// putEvents delivers events as EventBridge's PutEvents would (the local
// stack's ingress; in AWS the buses' rules deliver them to the trigger
// queue): each matching job gets a run before the answer.
func (h *Handler) putEvents(w http.ResponseWriter, r *http.Request) error {
	var b protocol.PutEvents
	if err := decode(r, &b, false); err != nil {
		return err
	}
	if err := b.Check(); err != nil {
		return err
	}
	entries := make([]triggers.EventEntry, len(b.Entries))
	trace := traceIDOf(r)
	for i, e := range b.Entries {
		var at time.Time
		if e.Time != "" {
			at, _ = time.Parse(time.RFC3339, e.Time) // Check parsed it
		}
		entries[i] = triggers.EventEntry{Source: e.Source, DetailType: e.DetailType, Detail: e.CompactDetail(),
			Resources: e.Resources, Time: at, TraceID: trace}
	}
	ids, err := h.svc.Triggers().PutEvents(r.Context(), entries)
	if err != nil {
		return err
	}
	answer := protocol.PutEventsAnswer{Entries: make([]protocol.PutEventsEntryAnswer, len(ids))}
	for i, id := range ids {
		answer.Entries[i].EventID = id
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// traceIDOf is the trace id of the request's traceparent header, or ""
// (the run gets a new trace). A header that is not a traceparent is
// ignored, not refused, as the W3C rules ask: a proxy on the way may have
// set it, and the caller cannot always help that.
func traceIDOf(r *http.Request) string {
	id, _, ok := protocol.ParseTraceParent(r.Header.Get(protocol.TraceParentHeader))
	if !ok {
		return ""
	}
	return id
}
