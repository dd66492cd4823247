// Package tracing exports the spans of runs and attempts over OTLP/HTTP
// with the OpenTelemetry SDK: one span per run (its creation to its end)
// and one per attempt (its claim to its end; its queueing, for an attempt
// never claimed), children of their run's span, a task's retries
// siblings. It is the scheduler's SpanSink (scheduler.Config.Spans): each
// span is emitted when the thing ends, by the process that records the
// end, under the span id derived from its name (protocol.RunSpanID,
// AttemptSpanID), so the claim answer's traceparent names the very span
// exported later and nothing about spans is stored.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// EnvEndpoint names the variable that turns export on: the collector's
// OTLP/HTTP base URL (http://127.0.0.1:4318; /v1/traces is added when the
// URL has no path).
const EnvEndpoint = "RUNLEDGER_OTLP_ENDPOINT"

// DefaultBatchTimeout is how long a finished span waits for its batch:
// short, since a Lambda entry flushes before each invocation returns and
// the local stack's spans should show at once.
const DefaultBatchTimeout = time.Second

// maxKnownTraces bounds the run -> trace id map of runs created in this
// process and not ended yet; past it the map starts over (a miss costs
// one read of the run).
const maxKnownTraces = 1 << 14

// RunReader reads a run whose trace id this process has not seen (its
// attempt ended in another process than its creation).
type RunReader interface {
	GetRun(ctx context.Context, id string) (ledger.Run, error)
}

// Config configures the exporter.
type Config struct {
	// Endpoint is the collector's OTLP/HTTP URL (required).
	Endpoint string
	// Runs reads runs whose trace id is not known here (required).
	Runs RunReader
	// BatchTimeout defaults to DefaultBatchTimeout.
	BatchTimeout time.Duration
	// Logger defaults to one that discards.
	Logger *slog.Logger
}

// Exporter is the scheduler's SpanSink over an OTLP/HTTP exporter.
type Exporter struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	runs     RunReader
	log      *slog.Logger

	mu     sync.Mutex
	traces map[string]string // run -> trace id
	// lookups are the attempt ends waiting for a read of their run.
	lookups sync.WaitGroup
}

var _ scheduler.SpanSink = (*Exporter)(nil)

// New builds the exporter; nothing is sent until a span ends.
func New(ctx context.Context, cfg Config) (*Exporter, error) {
	if cfg.Runs == nil {
		return nil, errors.New("tracing: Runs is required")
	}
	endpoint, err := endpointURL(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter for %s: %w", endpoint, err)
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = DefaultBatchTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "runledger"))
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(cfg.BatchTimeout)),
		sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(derivedIDs{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
	)
	return &Exporter{
		provider: provider, tracer: provider.Tracer("github.com/runledger/runledger"),
		runs: cfg.Runs, log: cfg.Logger, traces: map[string]string{},
	}, nil
}

// endpointURL is raw with /v1/traces added when it has no path.
func endpointURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: %s %q is not an http(s) URL", EnvEndpoint, raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// RunCreated remembers the run's trace id for its attempts' spans.
func (e *Exporter) RunCreated(run ledger.Run) {
	if run.TraceID == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.traces) >= maxKnownTraces {
		clear(e.traces)
	}
	e.traces[run.ID] = run.TraceID
}

// RunEnded emits the run's span: from its creation to its end, the root
// of its trace here.
func (e *Exporter) RunEnded(run ledger.Run) {
	e.mu.Lock()
	delete(e.traces, run.ID)
	e.mu.Unlock()
	if run.TraceID == "" || run.EndedAt.IsZero() {
		return
	}
	ctx := withIDs(context.Background(), run.TraceID, protocol.RunSpanID(run.ID))
	_, span := e.tracer.Start(ctx, "run "+run.Job, trace.WithTimestamp(run.CreatedAt), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("runledger.job", run.Job), attribute.String("runledger.run", run.ID),
			attribute.String("runledger.trigger", string(run.Trigger)),
			attribute.String("runledger.execution_state", string(run.ExecutionState)),
		))
	if run.ExecutionState == statemodel.RunFailed {
		span.SetStatus(codes.Error, string(run.ExecutionState))
	}
	span.End(trace.WithTimestamp(run.EndedAt))
}

// AttemptEnded emits the attempt's span, a child of its run's. A run
// whose trace id this process does not know is read first, off the
// caller's path.
func (e *Exporter) AttemptEnded(end scheduler.AttemptEnd) {
	e.mu.Lock()
	traceID, ok := e.traces[end.Key.Run]
	e.mu.Unlock()
	if ok {
		e.emitAttempt(traceID, end)
		return
	}
	e.lookups.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		run, err := e.runs.GetRun(ctx, end.Key.Run)
		if err != nil {
			e.log.WarnContext(ctx, "attempt span not exported", "run_id", end.Key.Run, "task", end.Key.Task,
				"attempt", end.Attempt.N, "error", err.Error())
			return
		}
		if run.TraceID != "" {
			e.emitAttempt(run.TraceID, end)
		}
	})
}

func (e *Exporter) emitAttempt(traceID string, end scheduler.AttemptEnd) {
	a := end.Attempt
	ref := protocol.AttemptRef{Run: end.Key.Run, Task: end.Key.Task, Attempt: a.N}
	start := a.StartedAt
	if start.IsZero() {
		start = a.QueuedAt // never claimed: its time in the queue
	}
	parent, ok := remoteParent(traceID, protocol.RunSpanID(end.Key.Run))
	if !ok {
		return
	}
	ctx := withIDs(trace.ContextWithRemoteSpanContext(context.Background(), parent), traceID, protocol.AttemptSpanID(ref))
	attrs := []attribute.KeyValue{
		attribute.String("runledger.job", end.Job), attribute.String("runledger.run", ref.Run),
		attribute.String("runledger.task", ref.Task), attribute.Int("runledger.attempt", a.N),
		attribute.String("runledger.outcome", string(a.Outcome)), attribute.Bool("runledger.claimed", a.Claimed()),
	}
	if a.WorkerID != "" {
		attrs = append(attrs, attribute.String("runledger.worker_id", a.WorkerID))
	}
	if a.ErrorCategory != "" {
		attrs = append(attrs, attribute.String("runledger.error_category", a.ErrorCategory))
	}
	_, span := e.tracer.Start(ctx, "attempt "+ref.Task, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
	if a.Outcome != statemodel.OutcomeSucceeded {
		span.SetStatus(codes.Error, string(a.Outcome))
	}
	span.End(trace.WithTimestamp(a.EndedAt))
}

// Flush sends every span ended so far (a Lambda entry calls it before its
// invocation returns: the process is frozen in between).
func (e *Exporter) Flush(ctx context.Context) error {
	e.lookups.Wait()
	return e.provider.ForceFlush(ctx)
}

// Shutdown flushes and stops the exporter.
func (e *Exporter) Shutdown(ctx context.Context) error {
	e.lookups.Wait()
	return e.provider.Shutdown(ctx)
}

// remoteParent is the span context of span spanID in trace traceID.
func remoteParent(traceID, spanID string) (trace.SpanContext, bool) {
	tid, err := trace.TraceIDFromHex(traceID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	sid, err := trace.SpanIDFromHex(spanID)
	if err != nil {
		return trace.SpanContext{}, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true}), true
}

// derivedIDs gives the SDK the ids a span must have (withIDs): a run's
// span and an attempt's are named by what they stand for, not drawn.
type derivedIDs struct{}

type idsKey struct{}

type ids struct {
	trace trace.TraceID
	span  trace.SpanID
}

// withIDs is ctx asking for a span of trace traceID with id spanID.
func withIDs(ctx context.Context, traceID, spanID string) context.Context {
	var v ids
	v.trace, _ = trace.TraceIDFromHex(traceID)
	v.span, _ = trace.SpanIDFromHex(spanID)
	return context.WithValue(ctx, idsKey{}, v)
}

func (derivedIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	v, _ := ctx.Value(idsKey{}).(ids)
	return v.trace, v.span
}

func (derivedIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	v, _ := ctx.Value(idsKey{}).(ids)
	return v.span
}
