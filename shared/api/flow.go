package api

import "github.com/runledger/runledger/shared/jobspec"

// bodyPriority reads a trigger's or backfill's priority: 0 when absent (the
// job's, or for a backfill one step after it), else 1..5 or a 422 naming
// priority.
func bodyPriority(p *int) (int, error) {
	if p == nil {
		return 0, nil
	}
	if err := jobspec.CheckPriority("priority", *p); err != nil {
		return 0, err
	}
	return *p, nil
}
