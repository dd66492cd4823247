// Package lambdaexec is the lambda executor: the scheduler starts an
// attempt by invoking a Lambda function asynchronously (InvocationType
// Event) with the attempt's envelope as the event; the function claims,
// heartbeats and completes through the worker routes (worker.HandleInvoke
// for a Go function), and the executor id is the invocation's request id.
//
// Lambda offers no way to ask what became of an asynchronous invocation,
// and none to stop one: the evidence comes to the scheduler instead, as the
// record Lambda's on-failure destination puts on the events queue when an
// invocation failed for good (protocol.InvocationFailure), which the
// events function applies as a confirmed failure. Check therefore knows
// nothing, and Stop does nothing: a cancel reaches the function through its
// heartbeat's answer.
//
// The executor invokes through Invoker, a port in its own terms: Client
// implements it over the AWS SDK, and Local runs registered Go handlers and
// commands in the local stack's process, sending the same on-failure record
// when a function fails its invocation. So the scheduler runs the same code
// in both places.
package lambdaexec

import (
	"context"
	"errors"
	"fmt"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// Invoker invokes a function asynchronously: it returns once the function's
// service has accepted the event, with the invocation's request id.
type Invoker interface {
	InvokeAsync(ctx context.Context, function string, payload []byte) (requestID string, err error)
}

// Executor is the lambda executor (scheduler.Executor).
type Executor struct {
	Invoker Invoker
}

var _ scheduler.Executor = Executor{}

// Type is jobspec.ExecutorLambda.
func (Executor) Type() string { return jobspec.ExecutorLambda }

// Start invokes spec.Function with env as the event.
func (x Executor) Start(ctx context.Context, env protocol.Envelope, spec jobspec.Executor) (string, error) {
	if spec.Function == "" {
		return "", errors.New("lambda executor: no function")
	}
	payload, err := wire.Marshal(env)
	if err != nil {
		return "", fmt.Errorf("lambda executor: envelope of %s/%s#%d: %w", env.Run, env.Task, env.Attempt, err)
	}
	id, err := x.Invoker.InvokeAsync(ctx, spec.Function, payload)
	if err != nil {
		return "", fmt.Errorf("invoke %s: %w", spec.Function, err)
	}
	return id, nil
}

// Stop does nothing: Lambda cannot stop an invocation. The function
// learns of the cancel from its heartbeat's answer.
func (Executor) Stop(context.Context, string, jobspec.Executor) error { return nil }

// Check knows nothing: a failed invocation reaches the scheduler by itself
// (Lambda's on-failure record on the events queue), and otherwise the
// lease, the clock skew and the evidence window decide.
func (Executor) Check(context.Context, jobspec.Executor, ledger.Instance, statemodel.AttemptRecord) (scheduler.Evidence, error) {
	return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, nil
}
