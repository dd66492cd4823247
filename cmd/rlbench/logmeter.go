package main

import (
	"context"
	"log/slog"
	"math"
	"sync/atomic"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// byteCounter is an io.Writer that keeps only the count of the bytes
// written to it.
type byteCounter struct{ n atomic.Int64 }

func (c *byteCounter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// logMeter counts what the stack's functions would send to CloudWatch
// Logs: the lines of its logger at the level the Lambda entries log at
// (shared/app: lambdaLogger, a JSON handler with slog's default level,
// Info) and its metric lines (the entries write them to stdout).
type logMeter struct {
	lines, metrics byteCounter
}

// handler is the stack's logger: every record at the Lambda entries'
// level is encoded as they would encode it and counted; the records the
// bench's own logger wants go on to it.
func (m *logMeter) handler(bench slog.Handler) slog.Handler {
	return teeHandler{counted: slog.NewJSONHandler(&m.lines, nil), bench: bench}
}

// bytes is the count so far.
func (m *logMeter) bytes() int64 { return m.lines.n.Load() + m.metrics.n.Load() }

// teeHandler hands each record to both handlers that want it.
type teeHandler struct{ counted, bench slog.Handler }

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.counted.Enabled(ctx, l) || t.bench.Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if t.counted.Enabled(ctx, r.Level) {
		_ = t.counted.Handle(ctx, r.Clone()) // a counter's write never fails
	}
	if t.bench.Enabled(ctx, r.Level) {
		return t.bench.Handle(ctx, r)
	}
	return nil
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{counted: t.counted.WithAttrs(as), bench: t.bench.WithAttrs(as)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{counted: t.counted.WithGroup(name), bench: t.bench.WithGroup(name)}
}

// noticeMeter is a notice sink that counts what the stack's EventBridge
// publisher (notice.EventBridge) would put on the bus: one entry per
// notice, billed per started 64 KB of it.
type noticeMeter struct{ entries, events atomic.Int64 }

func (m *noticeMeter) Publish(n protocol.Notice) {
	m.entries.Add(1)
	size := 0
	if detail, err := wire.Marshal(n); err == nil {
		size = len(detail) + len(n.Type) + len(protocol.NoticeSource)
	}
	m.events.Add(int64(max(1, math.Ceil(float64(size)/eventBridgeChunk))))
}
