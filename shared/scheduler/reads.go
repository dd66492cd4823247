package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// What the HTTP layer reads and writes beyond the decisions: it calls the
// service only, never the store. The reads pass through.

// GetJob reads a job as stored.
func (s *Service) GetJob(ctx context.Context, name string) (ledger.Job, error) {
	return s.store.GetJob(ctx, name)
}

// ListJobs lists jobs by name, a page at a time.
func (s *Service) ListJobs(ctx context.Context, limit int, token string) ([]ledger.Job, string, error) {
	return s.store.ListJobs(ctx, limit, token)
}

// PauseJob pauses a job: its schedule stops firing until ResumeJob.
func (s *Service) PauseJob(ctx context.Context, name string) (ledger.Job, error) {
	defer s.forgetEventIndex()
	return s.store.SetJobPaused(ctx, name, true)
}

// DeleteJob deletes a job only when it has no unfinished run
// (ledger.ErrUnfinishedRuns otherwise), in the store's conditional writes:
// a run created meanwhile either is found, or its creating write fails.
func (s *Service) DeleteJob(ctx context.Context, name string) error {
	defer s.forgetEventIndex()
	return s.store.DeleteJobIfIdle(ctx, name)
}

// ReadRun reads a run with its tasks.
func (s *Service) ReadRun(ctx context.Context, id string) (ledger.RunView, error) {
	return s.store.ReadRun(ctx, id)
}

// ListRuns lists runs newest first, a page at a time.
func (s *Service) ListRuns(ctx context.Context, f ledger.RunFilter) ([]ledger.Run, string, error) {
	return s.store.ListRuns(ctx, f)
}

// TaskHistory pages through a task instance's transitions, oldest first;
// ledger.ErrNotFound when the instance does not exist.
func (s *Service) TaskHistory(ctx context.Context, key ledger.InstanceKey, limit int, token string) ([]statemodel.Transition, string, error) {
	if _, err := s.store.GetInstance(ctx, key); err != nil {
		return nil, "", err
	}
	return s.store.History(ctx, key, limit, token)
}
