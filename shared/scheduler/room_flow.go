package scheduler

import (
	"context"
	"slices"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/statemodel"
)

// The flow room (package flow) owns the limiters, the task pools and the
// turns their writes take. The kernel reaches it through Service.flow:
// new runs are checked and admitted (CheckAdmissible, AdmitNewRun), an
// evaluation asks its Gate, an ended run releases its room (ReleaseRun),
// a dispatch holds its task's slot (SlotOf, HoldSlot) and a transition out
// of flight frees it (ReleasesSlot, FreeSlot), the timers ask whether a
// task is held (HeldByLimiter), and the operator's actions retry, pause
// and resume through it. The room calls the kernel back through
// flowKernel.

// newFlowRoom builds s's flow room, with the turns of s's Config.
func newFlowRoom(s *Service) *flow.Room {
	return flow.New(flow.Params{Kernel: flowKernel{s}, Store: s.store, Turns: s.cfg.Turns, Now: s.now, Logger: s.log})
}

// Flow is the Service's flow room: run admissions, limiters and task
// slots, for the API's answers.
func (s *Service) Flow() *flow.Room { return s.flow }

// RunPriority is a run's priority: the one it was stored with, else (a run
// stored before runs kept it) its job's, a backfill's run one step lower.
// The API's views call it without a Service: such a run's spec is
// compiled for the call, and the flow room uses flow.Priority with the
// compiled job it holds.
func RunPriority(run ledger.Run) int {
	if run.Priority != 0 {
		return run.Priority
	}
	c, _ := compileSpec(run.Spec)
	return flow.Priority(c, run)
}

// holdDispatches drops from an operator action's effects the dispatches
// the flow room holds (flow.Room.HoldsDispatches): the run waits in a
// limiter. Effects without a dispatch cost no read.
func holdDispatches(ctx context.Context, fl *flow.Room, runID string, effs []effect) []effect {
	isDispatch := func(e effect) bool { return e.kind == effDispatch }
	if !slices.ContainsFunc(effs, isDispatch) || !fl.HoldsDispatches(ctx, runID) {
		return effs
	}
	return slices.DeleteFunc(effs, isDispatch)
}

// flowKernel is the kernel as the flow room sees it (flow.Kernel).
type flowKernel struct{ s *Service }

// Compiled is the Service's compiled form of a job version.
func (k flowKernel) Compiled(spec []byte) (*jobspec.Compiled, error) { return k.s.compiled.of(spec) }

// Perform runs the room's work on the Service's effect runner.
func (k flowKernel) Perform(ctx context.Context, work ...flow.Work) {
	k.s.perform(ctx, effectsOfWork(work)...)
}

// ArmTimer arms a short timer with a delay message.
func (k flowKernel) ArmTimer(ctx context.Context, key ledger.InstanceKey, at time.Time) {
	delays{k.s}.arm(ctx, key, at)
}

// Operate applies an operator's event and stores the run after it.
func (k flowKernel) Operate(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) (ledger.Result, error) {
	return k.s.operate(ctx, key, ev)
}

// WriteVerdict writes a CREATED instance's dependency verdict on its own.
func (k flowKernel) WriteVerdict(ctx context.Context, inst ledger.Instance) (ledger.Instance, bool, error) {
	return k.s.writeVerdict(ctx, inst)
}

// effectsOfWork are the effects that do what the flow room asked.
func effectsOfWork(work []flow.Work) []effect {
	if len(work) == 0 {
		return nil
	}
	effs := make([]effect, len(work))
	for i, w := range work {
		if w.Kind == flow.Advance {
			effs[i] = effect{kind: effAdvanceRun, runID: w.RunID, view: w.View, current: w.View != nil, handedOn: w.HandOff}
			continue
		}
		key := w.Inst.Key
		effs[i] = effect{kind: effDispatch, key: key, inst: w.Inst, run: w.Run, runID: key.Run,
			depsMet: w.DepsMet, soleVerdict: w.SoleVerdict, answer: w.Answer, task: w.Task, handedOn: w.HandOff}
	}
	return effs
}
