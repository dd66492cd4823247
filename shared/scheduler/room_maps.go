package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler/maps"
	"github.com/runledger/runledger/statemodel"
)

// Maps is the maps room: map tasks' fan-out, their children and their
// outputs.
func (s *Service) Maps() *maps.Room[effect] { return s.maps }

// newMapsRoom builds the Service's maps room, which reaches the kernel
// through mapsKernel.
func newMapsRoom(s *Service) *maps.Room[effect] {
	return maps.New(maps.Params[effect]{Kernel: mapsKernel{s}, Store: s.store, Now: s.now, Policy: s.policy, Logger: s.log})
}

// mapsKernel is the maps room's Kernel: the Service's own steps.
type mapsKernel struct{ s *Service }

// Applied records res's applied transitions and answers their effects.
func (k mapsKernel) Applied(ctx context.Context, res ledger.Result) []effect {
	k.s.applied(ctx, res)
	return effectsOf(res)
}

// Follow records res's applied transitions and performs their effects.
func (k mapsKernel) Follow(ctx context.Context, res ledger.Result) { k.s.follow(ctx, res) }

// MapStep is the effect that moves the map task key on.
func (k mapsKernel) MapStep(key ledger.InstanceKey) effect {
	return effect{kind: effMapStep, key: key, runID: key.Run}
}

// Dispatch is the effect that dispatches child with the run held.
func (k mapsKernel) Dispatch(child ledger.Instance, run *ledger.Run) effect {
	return effect{kind: effDispatch, key: child.Key, inst: child, run: run, runID: child.Key.Run}
}

// AttemptToken is attemptToken.
func (k mapsKernel) AttemptToken(inst ledger.Instance, n int) (token, hash string, err error) {
	return attemptToken(inst, n)
}

// NewSecret is newSecret.
func (k mapsKernel) NewSecret() (ledger.Secret, error) { return newSecret() }

// NewID is the Service's NewID.
func (k mapsKernel) NewID() string { return k.s.NewID() }

// Operate is the Service's operate, its result left out.
func (k mapsKernel) Operate(ctx context.Context, key ledger.InstanceKey, ev statemodel.Event) error {
	_, err := k.s.operate(ctx, key, ev)
	return err
}

// AdvanceRun is the Service's advanceRun.
func (k mapsKernel) AdvanceRun(ctx context.Context, runID string, touch bool) error {
	return k.s.advanceRun(ctx, runID, touch)
}

// withMap makes nt a map task's NewTask when t is one (maps.WithMap).
func withMap(nt *ledger.NewTask, t jobspec.Task) { maps.WithMap(nt, t) }

// parentKey is the map task of a child (maps.ParentKey).
func parentKey(child ledger.InstanceKey) (ledger.InstanceKey, bool) { return maps.ParentKey(child) }
