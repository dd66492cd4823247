package app

import (
	"context"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/scheduler"
)

// LambdaFunctions are the local stack's lambda executor: functions by name
// that a job's `{"type": "lambda", "function": NAME}` invokes in the
// stack's process (lambdaexec.Local). Their names are what job definitions
// may name; a function that fails its invocation sends Lambda's on-failure
// record to the stack's events queue, as the stack's destination does in
// AWS.
type LambdaFunctions struct {
	Local *lambdaexec.Local
}

// Part returns the functions as the Part named "lambda": the executor, its
// allow-list, and the invocations' lifetime.
func (f LambdaFunctions) Part() Part {
	return Part{
		Name:      "lambda",
		Executors: []scheduler.Executor{lambdaexec.Executor{Invoker: f.Local}},
		Allowed:   jobspec.Allowed{LambdaFunctions: f.Local.Names()},
		Start: func(l Local) (func(context.Context) error, error) {
			events := l.Queues[QueueEvents]
			// Bound before Start returns: the stack dispatches as soon as
			// its parts have started.
			invocations, stop := context.WithCancel(context.Background())
			f.Local.Bind(invocations, l.APIURL, func(ctx context.Context, body string) error {
				_, err := l.Queue.Send(ctx, events, body, nil)
				return err
			})
			return func(ctx context.Context) error {
				<-ctx.Done()
				stop()
				f.Local.Wait()
				return nil
			}, nil
		},
	}
}
