// Package local runs the Lambda handlers in-process, behind adapters that
// give them what AWS would: an SQS event source with Lambda's batching,
// partial-failure and visibility semantics (Poller), an EventBridge
// schedule (Ticker), and API Gateway's HTTP API in front of the http.Handler
// through the same payload 2.0 adapter the Lambda entry point uses
// (Server). The embedded local stack and the end-to-end tests run the very
// handlers Lambda runs, against the real emulators.
//
// Every call of a handler is one invocation: it gets a context carrying a
// lambdacontext.LambdaContext (request id, function ARN) and the function
// timeout as its deadline, and it is detached from the caller's
// cancellation, so stopping an adapter lets the invocation in flight finish,
// as Lambda does. A panic is recovered and counts as a failed invocation.
package local

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Defaults shared by the adapters.
const (
	// DefaultRegion and DefaultAccount fill ARNs and events when the
	// configuration names none.
	DefaultRegion  = "us-east-1"
	DefaultAccount = "000000000000"
	// DefaultFunctionTimeout is the invocation deadline when none is set.
	// It equals API Gateway's integration timeout, so the HTTP API never
	// has a function that may outlive the gateway.
	DefaultFunctionTimeout = 30 * time.Second
)

// ErrFunctionTimeout marks an invocation that returned after its deadline.
// Lambda would have stopped it there and reported a failure, whatever it
// returned.
var ErrFunctionTimeout = errors.New("function timed out")

// errPanic marks an invocation that panicked.
var errPanic = errors.New("function panicked")

// function describes one Lambda function for invoke.
type function struct {
	name, region, account string
	timeout               time.Duration
	counters              *Counters
	log                   *slog.Logger
}

func (f function) arn() string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", f.region, f.account, f.name)
}

// invoke runs call as one invocation. The failure (error, panic or
// timeout) is logged here, once, and returned for the adapter to act on.
func (f function) invoke(parent context.Context, call func(ctx context.Context) error) (err error) {
	requestID := newUUID()
	ctx := lambdacontext.NewContext(context.WithoutCancel(parent), &lambdacontext.LambdaContext{
		AwsRequestID:       requestID,
		InvokedFunctionArn: f.arn(),
	})
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	began := time.Now()
	defer func() {
		took := time.Since(began)
		if r := recover(); r != nil {
			err = fmt.Errorf("invoke %s (request %s): %w: %v", f.name, requestID, errPanic, r)
			f.log.ErrorContext(parent, "function panicked", "function", f.name, "request_id", requestID,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		} else if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			// Lambda ends the invocation at the deadline; what the handler
			// returned afterwards never reaches the caller.
			err = fmt.Errorf("invoke %s (request %s): %w after %s", f.name, requestID, ErrFunctionTimeout, f.timeout)
			f.log.ErrorContext(parent, "function timed out", "function", f.name, "request_id", requestID,
				"timeout_ms", f.timeout.Milliseconds(), "duration_ms", took.Milliseconds())
		} else if err != nil {
			err = fmt.Errorf("invoke %s (request %s): %w", f.name, requestID, err)
			f.log.ErrorContext(parent, "function failed", "function", f.name, "request_id", requestID, "err", err)
		}
		f.counters.invocation(f.name, took, err != nil)
	}()
	return call(ctx)
}

func loggerOrDefault(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newUUID returns a random (version 4) UUID, the shape of Lambda request
// ids, EventBridge event ids and API Gateway request ids.
func newUUID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
