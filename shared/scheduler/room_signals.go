package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/statemodel"
)

// Signals is the signal tasks: the signal route's service.
func (s *Service) Signals() *signals.Room { return s.signals }

// newSignalsRoom builds the signal tasks' room of s.
func newSignalsRoom(s *Service) *signals.Room {
	return signals.New(signals.Params{Kernel: signalsKernel{s}, Store: s.store, ErrNotFound: ErrNotFound})
}

// signalsKernel is the kernel as the signal tasks reach it.
type signalsKernel struct{ s *Service }

func (k signalsKernel) Now() time.Time { return k.s.now() }

func (k signalsKernel) Policy() statemodel.Policy { return k.s.policy() }

func (k signalsKernel) Transient(err error) bool { return transient(err) }

func (k signalsKernel) NewID() string { return k.s.NewID() }

func (k signalsKernel) Follow(ctx context.Context, res ledger.Result) { k.s.follow(ctx, res) }

func (k signalsKernel) Notice(ctx context.Context, sig protocol.Signal) { k.s.signal(ctx, sig) }

// signalExecutor is the executor of signal tasks (jobspec.ExecutorSignal):
// it starts nothing. Its attempt is recorded as dispatched and started in
// one write (recordDispatch adds signal.requested to dispatch.accepted),
// and then waits for POST /v1/runs/{run}/tasks/{task}/signal (signals.Room.SignalTask)
// or its run timeout (the reconciler's signal.timeout). It is never LOST,
// so it is never asked for evidence, nor to stop.
type signalExecutor struct{}

func (signalExecutor) Type() string { return jobspec.ExecutorSignal }

func (signalExecutor) Start(_ context.Context, env protocol.Envelope, _ jobspec.Executor) (string, error) {
	return fmt.Sprintf("signal:%d", env.Attempt), nil
}

func (signalExecutor) Stop(context.Context, string, jobspec.Executor) error { return nil }

func (signalExecutor) Check(context.Context, jobspec.Executor, ledger.Instance, statemodel.AttemptRecord) (Evidence, error) {
	return Evidence{Verdict: VerdictUnknown}, nil
}
