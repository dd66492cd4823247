package scheduler

import (
	"context"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler/signals"
	"github.com/runledger/runledger/statemodel"
)

// Signals is the signal tasks: the signal route's service.
func (s *Service) Signals() *signals.Room { return s.signals }

// newSignalsRoom builds the signal tasks' room of s.
func newSignalsRoom(s *Service) *signals.Room {
	return signals.New(signals.Params{Kernel: signalsKernel{s}, Store: s.store})
}

// signalsKernel is the kernel as the signal tasks reach it.
type signalsKernel struct{ s *Service }

func (k signalsKernel) Now() time.Time { return k.s.now() }

func (k signalsKernel) Policy() statemodel.Policy { return k.s.policy() }

func (k signalsKernel) Transient(err error) bool { return transient(err) }

func (k signalsKernel) NewID() string { return k.s.NewID() }

func (k signalsKernel) Follow(ctx context.Context, res ledger.Result) { k.s.follow(ctx, res) }

func (k signalsKernel) Notice(ctx context.Context, n protocol.Notice) { k.s.notices.notify(ctx, n) }
