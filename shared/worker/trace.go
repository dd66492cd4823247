package worker

import (
	"context"

	"go.opentelemetry.io/otel/propagation"

	"github.com/runledger/runledger/shared/protocol"
)

// Trace context for the handler: the claim answer's traceparent (the
// attempt's own span in its run's trace) is put in the handler's ctx as
// the W3C propagator reads it from a request, so a span the handler
// starts with an OpenTelemetry tracer is a child of the attempt's span,
// with no code of the handler's own. TraceParent reads it back for a
// handler that passes it on by hand (an HTTP header, a subprocess).

type traceParentKey struct{}

// withTraceParent is ctx carrying traceparent ("" leaves ctx as it is:
// a run stored before runs kept a trace id).
func withTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	ctx = context.WithValue(ctx, traceParentKey{}, traceparent)
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{protocol.TraceParentHeader: traceparent})
}

// TraceParent is the W3C traceparent of the attempt a handler runs: its
// run's trace id and the attempt's span id ("" when the attempt has
// none). `runledger worker exec` passes it to its command as TRACEPARENT.
func TraceParent(ctx context.Context) string {
	v, _ := ctx.Value(traceParentKey{}).(string)
	return v
}
