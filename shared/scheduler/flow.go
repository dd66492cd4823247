package scheduler

import (
	"context"

	"github.com/runledger/runledger/shared/jobspec"
)

// checkGroupLimits refuses j when a job of a group it names gives that
// group another limit (jobspec.CheckGroupLimit), before anything is
// written.
func (s *Service) checkGroupLimits(ctx context.Context, j jobspec.Job) error {
	if !namesGroup(j) {
		return nil
	}
	token := ""
	for {
		jobs, next, err := s.store.ListJobs(ctx, 100, token)
		if err != nil {
			return err
		}
		for _, lj := range jobs {
			other, err := jobspec.Load(lj.Spec)
			if err != nil {
				continue // not this package's to judge; LoadJob reports it
			}
			if err := jobspec.CheckGroupLimit(j, other); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

func namesGroup(j jobspec.Job) bool {
	if j.Concurrency != nil && j.Concurrency.Group != "" {
		return true
	}
	for _, t := range j.TaskDefs {
		if t.Concurrency != nil && t.Concurrency.Group != "" {
			return true
		}
	}
	return false
}
