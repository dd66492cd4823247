package scheduler

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/workers"
	"github.com/runledger/runledger/statemodel"
)

// Workers is the worker protocol: the claim, heartbeat and completion
// routes' service.
func (s *Service) Workers() *workers.Room { return s.workers }

// newWorkersRoom builds the worker protocol's room of s.
func newWorkersRoom(s *Service) *workers.Room {
	return workers.New(workers.Params{Kernel: workersKernel{s}, Store: s.store, Queue: s.queue,
		EventsQueueURL: s.cfg.EventsQueueURL, ClaimWait: s.cfg.ClaimWait, MaxClockSkew: s.cfg.MaxClockSkew, Log: s.log})
}

// workersKernel is the kernel as the worker protocol reaches it.
type workersKernel struct{ s *Service }

func (k workersKernel) Now() time.Time { return k.s.now() }

func (k workersKernel) Policy() statemodel.Policy { return k.s.policy() }

func (k workersKernel) Transient(err error) bool { return transient(err) }

func (k workersKernel) AttemptToken(inst ledger.Instance, n int) (string, error) {
	token, _, err := attemptToken(inst, n)
	return token, err
}

func (k workersKernel) NonceMatches(inst ledger.Instance, n int, bearer string) bool {
	return nonceMatches(inst, n, bearer)
}

// Envelope is the envelope of attempt n of inst, without its inputs.
func (k workersKernel) Envelope(inst ledger.Instance, run ledger.Run, n int, token string) protocol.Envelope {
	return claimEnvelope(inst, run, n, token)
}

func (k workersKernel) FollowInRun(ctx context.Context, res ledger.Result, view ledger.RunView) {
	k.s.applied(ctx, res)
	k.s.perform(ctx, withHeld(effectsOf(res), view)...)
}

func (k workersKernel) Follow(ctx context.Context, res ledger.Result) { k.s.follow(ctx, res) }

func (k workersKernel) ReconcileInstance(ctx context.Context, key ledger.InstanceKey) error {
	return k.s.reconcileInstance(ctx, key, false)
}
