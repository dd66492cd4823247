package scheduler

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// Executor runs the attempts of tasks whose `executor` is not the pool's
// queue (docs/api.md, "Executors"): a Lambda function, an ECS task. One
// Executor serves one type; Config.Executors registers them, and the
// scheduler calls them from the same code paths for every type:
//
//   - Dispatch: an instance whose task names the executor's type goes
//     SCHEDULED -> QUEUED through Start instead of an SQS send. Start gets
//     attempt n's envelope (token included, and the attempt's one-time
//     claim nonce in ClaimNonce, for an executor whose start input others
//     may read: it passes the nonce, never the token) and the task's
//     executor as the definition gave it, and must return once the
//     executor has accepted the attempt (Lambda: the Invoke answered
//     202; ECS: RunTask returned
//     the task), with the executor's id for it: the scheduler records the
//     type and that id on the attempt, in the write that records
//     dispatch.accepted, and the attempt view shows them. An error is a
//     failed dispatch, handled as a failed SQS send: the instance stays
//     SCHEDULED and its timer tries again (the same attempt, with the
//     same token) until the queue timeout since it became SCHEDULED, then it
//     fails with category dispatch_failed and the error as its reason.
//     Start must not retry on its own beyond what its SDK does, and must
//     honour ctx. If Start succeeded but another dispatcher's write
//     recorded the attempt first, the started work holds the same
//     attempt's token (or nonce): one claim wins and the other is refused
//     (409, or 401 for a used nonce), and the refused work must exit
//     without running the payload.
//   - The work itself claims, heartbeats and completes through the worker
//     routes with the envelope's run, task, attempt and token (the claim
//     answer carries the whole envelope, so a process started with only
//     those can fetch its payload). The executor reports nothing itself
//     on the normal path.
//   - Evidence: when the attempt is LOST, the reconciler asks Check of
//     the attempt's executor, and only it (the worker leases are asked
//     about queue attempts only). Check reads the executor's own view of
//     the work named by a.ExecutorID (ECS: DescribeTasks) and answers a
//     Verdict: VerdictFailed (with ErrorCategory, and a detail such as the
//     exit code) or VerdictSucceeded when the executor saw the work end;
//     VerdictRunning while it still runs; VerdictUnknown when it cannot
//     tell (then the lease, the max clock skew and the evidence window
//     decide). An error is logged and counts as unknown. Evidence that
//     arrives by itself (Lambda's on-failure destination) goes through
//     Service.ExecutorFailed instead.
//   - Cancel: when a cancel of a running attempt reaches its cancel
//     timeout (CANCELLING -> LOST with cancel requested), the scheduler
//     calls Stop with the attempt's executor id, once per timeout, best
//     effort: an error is logged, and the reconciler resolves the LOST
//     attempt from evidence as usual. An executor that cannot stop its work
//     (Lambda) returns nil.
//
// Every method may be called concurrently and must be safe for it.
type Executor interface {
	// Type is the executor type this serves: jobspec.ExecutorLambda or
	// jobspec.ExecutorECS.
	Type() string
	// Start starts attempt env.Attempt of env.Run/env.Task and returns the
	// executor's id for it.
	Start(ctx context.Context, env protocol.Envelope, spec jobspec.Executor) (executorID string, err error)
	// Stop asks the executor to stop the work it started as executorID.
	Stop(ctx context.Context, executorID string, spec jobspec.Executor) error
	// Check tells what the executor knows of a LOST attempt it started.
	Check(ctx context.Context, spec jobspec.Executor, inst ledger.Instance, a statemodel.AttemptRecord) (Evidence, error)
}

// instanceExecutor is the executor an instance's task names.
func instanceExecutor(inst ledger.Instance) (jobspec.Executor, error) {
	e, err := jobspec.ParseExecutor(inst.Executor)
	if err != nil {
		return jobspec.Executor{}, fmt.Errorf("executor of %s: %w", inst.Key, err)
	}
	return e, nil
}

// executors are the Service's executors by type (Config.Executors and the
// signal tasks' own), with the evidence providers of queue attempts.
type executors struct {
	byType   map[string]Executor
	evidence []EvidenceProvider
	log      *slog.Logger
}

// newExecutors registers cfg's executors beside the signal tasks'.
func newExecutors(cfg Config) *executors {
	e := &executors{byType: map[string]Executor{jobspec.ExecutorSignal: signalExecutor{}}, evidence: cfg.Evidence, log: cfg.Logger}
	for _, ex := range cfg.Executors {
		e.byType[ex.Type()] = ex
	}
	return e
}

// of is the registered executor of spec's type.
func (e *executors) of(spec jobspec.Executor) (Executor, error) {
	ex, ok := e.byType[spec.Type]
	if !ok {
		return nil, fmt.Errorf("no %s executor is configured in this deployment", spec.Type)
	}
	return ex, nil
}

// executorEvidence asks an attempt's executor, as an EvidenceProvider.
type executorEvidence struct {
	ex   Executor
	spec jobspec.Executor
}

func (e executorEvidence) Name() string { return e.ex.Type() }

func (e executorEvidence) Check(ctx context.Context, inst ledger.Instance, a statemodel.AttemptRecord) (Evidence, error) {
	return e.ex.Check(ctx, e.spec, inst, a)
}

// evidenceFor lists the providers to ask about attempt a: its executor's
// for an attempt started outside the queues, else the configured ones
// (the worker leases first).
func (e *executors) evidenceFor(inst ledger.Instance, a statemodel.AttemptRecord) []EvidenceProvider {
	if a.Executor == "" || a.Executor == jobspec.ExecutorQueue {
		return e.evidence
	}
	spec, err := instanceExecutor(inst)
	if err != nil {
		return nil
	}
	ex, err := e.of(spec)
	if err != nil {
		return nil
	}
	return []EvidenceProvider{executorEvidence{ex: ex, spec: spec}}
}

// stop asks a's executor to stop it (a cancel reached its timeout).
// Queue attempts have nothing to stop: their worker learns of the cancel
// from its heartbeat's answer.
func (e *executors) stop(ctx context.Context, inst ledger.Instance, a statemodel.AttemptRecord) {
	if a.Executor == "" || a.Executor == jobspec.ExecutorQueue || a.ExecutorID == "" {
		return
	}
	spec, err := instanceExecutor(inst)
	if err == nil {
		var ex Executor
		if ex, err = e.of(spec); err == nil {
			err = ex.Stop(ctx, a.ExecutorID, spec)
		}
	}
	if err != nil {
		e.log.WarnContext(ctx, "stop attempt", "run_id", inst.Key.Run, "task", inst.Key.Task, "attempt", a.N,
			"executor", a.Executor, "executor_id", a.ExecutorID, "error", err.Error())
		return
	}
	e.log.InfoContext(ctx, "attempt stopped", "run_id", inst.Key.Run, "task", inst.Key.Task, "attempt", a.N,
		"executor", a.Executor, "executor_id", a.ExecutorID)
}

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
