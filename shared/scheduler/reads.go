package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// What the HTTP layer reads and writes beyond the decisions: it calls the
// service only, never the store. The reads pass through.

// ReadRun reads a run with its tasks.
func (s *Service) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	return s.store.ReadRun(ctx, id)
}

// ListRuns lists runs newest first, a page at a time.
func (s *Service) ListRuns(ctx context.Context, f ledger.RunFilter) ([]ledger.Run, string, error) {
	return s.store.ListRuns(ctx, f)
}

// TaskHistory pages through a task instance's transitions, oldest first,
// with its run's trace id ("" for a run stored before runs kept one):
// the records show the run's, which is stored on the run alone.
// ledger.ErrNotFound when the instance does not exist.
func (s *Service) TaskHistory(ctx context.Context, key ledger.InstanceKey, limit int, token string) (trs []statemodel.Transition, next, traceID string, err error) {
	_, run, err := s.store.GetInstanceAndRun(ctx, key)
	if err != nil {
		return nil, "", "", err
	}
	trs, next, err = s.store.History(ctx, key, limit, token)
	return trs, next, run.TraceID, err
}
