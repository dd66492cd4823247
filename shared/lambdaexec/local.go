package lambdaexec

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/shared/worker"
)

// Function is a Lambda function's handler as the local stack runs it: the
// event (the attempt's envelope, as JSON) in, and an error when the
// invocation fails (a panic is one too). A Go function built on the worker
// SDK is a worker.Handler registered with Local.Handlers, which wraps it in
// worker.HandleInvoke.
type Function func(ctx context.Context, event json.RawMessage) error

// ErrUnknownFunction: the local stack has no function of that name.
var ErrUnknownFunction = fault.New(fault.NotFound, "no such local function")

// Local is Invoker for the local stack: it runs registered functions in
// the stack's process, each invocation in its own goroutine. A function
// that fails its invocation (returns an error, or panics) gets the record
// Lambda's on-failure destination would send to the events queue, once:
// the local stack retries no invocation, as if the function's
// MaximumRetryAttempts were 0.
type Local struct {
	// Functions are raw functions by name.
	Functions map[string]Function
	// Handlers are Go functions on the worker SDK by name, run through
	// worker.HandleInvoke against APIURL.
	Handlers map[string]worker.Handler
	// Logger (default: discarded).
	Logger *slog.Logger

	mu     sync.Mutex
	apiURL string
	// failed sends an on-failure record's JSON to the events queue.
	failed func(ctx context.Context, body string) error
	ctx    context.Context
	wg     sync.WaitGroup
}

var _ Invoker = (*Local)(nil)

// Names lists the registered function names, sorted: what the local stack
// allows job definitions to name.
func (l *Local) Names() []string {
	var out []string
	for n := range l.Functions {
		out = append(out, n)
	}
	for n := range l.Handlers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Bind connects l to the running stack: the API the Go functions call,
// and where on-failure records go. Invocations run until ctx ends.
func (l *Local) Bind(ctx context.Context, apiURL string, failed func(ctx context.Context, body string) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ctx, l.apiURL, l.failed = ctx, apiURL, failed
}

// Wait waits for the invocations under way.
func (l *Local) Wait() { l.wg.Wait() }

// InvokeAsync starts function (a name, or an ARN whose function name is
// registered) on payload and returns its request id at once.
func (l *Local) InvokeAsync(_ context.Context, function string, payload []byte) (string, error) {
	name := jobspec.FunctionName(function)
	run, ok := l.function(name)
	if !ok {
		return "", fmt.Errorf("local lambda invoke %s: %w: %q", function, ErrUnknownFunction, name)
	}
	l.mu.Lock()
	ctx, failed := l.ctx, l.failed
	l.mu.Unlock()
	if ctx == nil {
		return "", fmt.Errorf("local lambda invoke %s: the local stack has not started its functions", function)
	}
	id := requestID()
	log := l.logger().With("function", name, "request_id", id)
	l.wg.Go(func() {
		err := call(ctx, run, payload, log)
		if err == nil {
			return
		}
		log.WarnContext(ctx, "invocation failed", "err", err.Error())
		body, merr := failureRecord(name, id, payload, err)
		if merr != nil {
			log.ErrorContext(ctx, "on-failure record not built", "err", merr.Error())
			return
		}
		if serr := failed(context.WithoutCancel(ctx), body); serr != nil {
			log.ErrorContext(ctx, "on-failure record not sent", "err", serr.Error())
		}
	})
	return id, nil
}

func (l *Local) function(name string) (Function, bool) {
	if f, ok := l.Functions[name]; ok {
		return f, true
	}
	h, ok := l.Handlers[name]
	if !ok {
		return nil, false
	}
	return func(ctx context.Context, event json.RawMessage) error {
		var env worker.Envelope
		if err := json.Unmarshal(event, &env); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		l.mu.Lock()
		apiURL := l.apiURL
		l.mu.Unlock()
		return worker.HandleInvoke(worker.InvokeConfig{APIURL: apiURL, Name: name, Logger: l.logger().With("function", name)}, h)(ctx, env)
	}, true
}

// panicError is a function's panic, which fails its invocation as an
// unhandled error does in Lambda.
type panicError struct{ value any }

func (p panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// call runs f, turning a panic into the invocation's error.
func call(ctx context.Context, f Function, payload []byte, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.ErrorContext(ctx, "local function panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = panicError{r}
		}
	}()
	return f(ctx, payload)
}

// failureRecord is Lambda's on-failure record of invocation id of the
// function name on payload that failed with err.
func failureRecord(name, id string, payload []byte, err error) (string, error) {
	var env protocol.Envelope
	if jerr := json.Unmarshal(payload, &env); jerr != nil {
		return "", fmt.Errorf("decode the invocation's payload: %w", jerr)
	}
	kind, typ := "Handled", "Error"
	var p panicError
	if errors.As(err, &p) {
		kind, typ = "Unhandled", "Runtime.Panic"
	}
	b, merr := wire.Marshal(protocol.InvocationFailure{
		Timestamp: time.Now(), RequestID: id,
		FunctionARN: "arn:aws:lambda:local:000000000000:function:" + name + ":$LATEST",
		Condition:   protocol.ConditionRetriesExhausted, ApproximateInvokeCount: 1,
		Envelope: env, FunctionError: kind, ErrorType: typ, ErrorMessage: protocol.ClipReason(err.Error()),
	})
	return string(b), merr
}

// requestID is a random id in the form of Lambda's (a UUID).
func requestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (l *Local) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Logger
}
