package scheduler

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/flow"
	"github.com/runledger/runledger/shared/scheduler/triggers"
)

// The triggers room (package triggers) starts runs: manual triggers,
// schedules and their catch-up, backfills, trigger events. The kernel
// calls it for a due job timer (Tick: FireJob), a due backfill timer
// (AdvanceBackfill), a backfill's run that ended (BackfillRunEnded), a
// trigger event off the trigger queue (StartFromEvent), a job written
// (ForgetEventIndex) and an upstream run looked up by its logical time
// (RunAt).

// DefaultTickerPeriod is Config.TickerPeriod's default: the CDK stack's
// ticker runs every minute (triggers.DefaultTickerPeriod, with the
// catch-up it shapes).
const DefaultTickerPeriod = triggers.DefaultTickerPeriod

// TriggerRequest is a run to start (triggers.TriggerRequest), named here
// too for the kernel's and its tests' many callers.
type TriggerRequest = triggers.TriggerRequest

// Triggers is the room that starts runs; the API, the composition root
// and the tests call it for triggers, backfills, resumes and PutEvents.
func (s *Service) Triggers() *triggers.Room[effect] { return s.triggers }

// newTriggersRoom builds the triggers room over s.
func newTriggersRoom(s *Service) *triggers.Room[effect] {
	return triggers.New(triggers.Params[effect]{Kernel: triggersKernel{s}, Store: s.store, Logger: s.log,
		TickerPeriod: s.cfg.TickerPeriod, BadMessage: ErrBadMessage})
}

// triggersKernel is the kernel as the triggers room sees it
// (triggers.Kernel).
type triggersKernel struct{ s *Service }

// Now is the Service's clock.
func (k triggersKernel) Now() time.Time { return k.s.now() }

// NewID returns a new ULID.
func (k triggersKernel) NewID() string { return k.s.NewID() }

// DeadlineReached reports whether a pass should stop starting new work.
func (k triggersKernel) DeadlineReached(ctx context.Context) bool { return k.s.deadlineReached(ctx) }

// LoadJob reads a job and its compiled definition.
func (k triggersKernel) LoadJob(ctx context.Context, name string) (ledger.Job, jobspec.Job, error) {
	return k.s.jobs.LoadJob(ctx, name)
}

// CompiledJob is spec's definition, compiled once per version.
func (k triggersKernel) CompiledJob(spec []byte) (jobspec.Job, error) {
	c, err := k.s.compiled.of(spec)
	if err != nil {
		return jobspec.Job{}, err
	}
	return c.Job, nil
}

// NewSecret returns a new instance's attempt secret.
func (k triggersKernel) NewSecret() (ledger.Secret, error) { return newSecret() }

// ExecutorJSON is how an instance keeps its task's executor.
func (k triggersKernel) ExecutorJSON(e jobspec.Executor) []byte { return executorJSON(e) }

// WithMap makes nt a map task's NewTask when t is one.
func (k triggersKernel) WithMap(nt *ledger.NewTask, t jobspec.Task) { withMap(nt, t) }

// CheckEnvelopes checks every dispatch message of nr's tasks.
func (k triggersKernel) CheckEnvelopes(nr ledger.NewRun, now time.Time) error {
	return checkEnvelopes(nr, now)
}

// StartPriority is the priority a new run is stored with.
func (k triggersKernel) StartPriority(j jobspec.Job, req triggers.TriggerRequest) int {
	return flow.StartPriority(j, req.Priority, req.Trigger)
}

// CheckAdmissible refuses a new run its limiters cannot take.
func (k triggersKernel) CheckAdmissible(ctx context.Context, j jobspec.Job, nr ledger.NewRun) error {
	return k.s.flow.CheckAdmissible(ctx, j, nr)
}

// Created tells the observers of a new run's instances.
func (k triggersKernel) Created(view ledger.RunView) { k.s.created(view) }

// NewRunEffects are what moves a new run of j on.
func (k triggersKernel) NewRunEffects(view ledger.RunView, j jobspec.Job) []effect {
	return newRunEffects(view, j)
}

// Perform runs effs on the Service's runner, completing answer if set.
func (k triggersKernel) Perform(ctx context.Context, effs []effect, answer *ledger.RunView) {
	if answer != nil {
		effs = withAnswer(effs, answer)
	}
	k.s.perform(ctx, effs...)
}

// CancelRun cancels a run.
func (k triggersKernel) CancelRun(ctx context.Context, runID, reason string) error {
	return k.s.CancelRun(ctx, runID, reason)
}

// CancelUnfinished cancels the job's unfinished runs of earlier slots.
func (k triggersKernel) CancelUnfinished(ctx context.Context, job string, at time.Time) error {
	return k.s.cancelUnfinished(ctx, job, at)
}

// Notice logs a notice and hands it to the sink.
func (k triggersKernel) Notice(ctx context.Context, n protocol.Notice) { k.s.notices.notify(ctx, n) }

// Transient reports whether err may go away by itself.
func (k triggersKernel) Transient(err error) bool { return transient(err) }
