package ledger

import (
	"fmt"
	"slices"
	"time"
)

// timerKindJobFire is a job item's timer: its next scheduled fire.
const timerKindJobFire = "job_fire"

// Job is a job definition item. Spec is the definition as the API validated
// it (JSON), opaque to the store beyond the indexed fields kept beside it.
type Job struct {
	Name       string
	Version    int64
	Paused     bool
	Spec       []byte
	NextFireAt time.Time // zero: manual only, or no fire left
	// CatchupNext and CatchupLast bound the catch-up runs decided and not
	// started yet: the schedule's slots from CatchupNext through
	// CatchupLast (zero: none pending). See SchedulePosition.
	CatchupNext time.Time
	CatchupLast time.Time
	// MissedSlots counts the slots the schedule skipped, in all: MoveSchedule
	// and ResumeJob add to it.
	MissedSlots int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// Upstream names the jobs this job's runs wait on (depends_on_jobs), at
	// most MaxUpstreamJobs. The store keeps one dependency edge item per
	// upstream job, keyed by it, written and removed with the job, so the
	// dependents of a job are one Query (ListDependents).
	Upstream []string
}

// SchedulePosition is where a job's schedule stands: the schedule state the
// ticker moves, apart from the definition a client edits with If-Match.
type SchedulePosition struct {
	// NextFireAt is the next slot the schedule fires (zero: none).
	NextFireAt time.Time
	// CatchupNext and CatchupLast bound the pending catch-up runs (zero:
	// none): one run per slot of the schedule from CatchupNext through
	// CatchupLast, started in batches, each batch moving CatchupNext on.
	CatchupNext, CatchupLast time.Time
}

// Position is the job's schedule position.
func (j Job) Position() SchedulePosition {
	return SchedulePosition{NextFireAt: j.NextFireAt, CatchupNext: j.CatchupNext, CatchupLast: j.CatchupLast}
}

// TimerAt is when the job is due to the ticker: its first pending
// catch-up slot, else its next fire; zero while paused or with nothing
// ahead.
func (j Job) TimerAt() time.Time {
	switch {
	case j.Paused:
		return time.Time{}
	case !j.CatchupNext.IsZero():
		return j.CatchupNext
	}
	return j.NextFireAt
}

// ScheduleMove moves a job's schedule from one position to another, as
// decided from the job at Version.
type ScheduleMove struct {
	Version  int64
	From, To SchedulePosition
	// Missed is how many slots the move skips (added to MissedSlots).
	Missed int64
}

// MaxUpstreamJobs bounds a job's depends_on_jobs: an update that replaces
// every edge (remove the old ones, put the new ones, write the job) stays
// in one transaction of 1 + 2*32 actions.
const MaxUpstreamJobs = 32

// checkUpstream validates and normalises a job's upstream list: sorted,
// each a valid job name whose edge key fits, none twice, not the job
// itself, at most MaxUpstreamJobs.
func checkUpstream(j *Job) error {
	if len(j.Upstream) > MaxUpstreamJobs {
		return fmt.Errorf("%w: %d upstream jobs, at most %d", ErrInvalidInput, len(j.Upstream), MaxUpstreamJobs)
	}
	up := slices.Clone(j.Upstream)
	slices.Sort(up)
	if len(up) > 0 {
		if err := CheckTail("dependent job", j.Name, "DEP#"+j.Name, MaxSortKeyBytes); err != nil {
			return err
		}
	}
	for i, u := range up {
		if err := CheckName("upstream job", u, MaxJobNameBytes); err != nil {
			return err
		}
		switch {
		case u == j.Name:
			return fmt.Errorf("%w: job %s depends on itself", ErrInvalidInput, j.Name)
		case i > 0 && up[i-1] == u:
			return fmt.Errorf("%w: upstream job %s named twice", ErrInvalidInput, u)
		}
	}
	if len(up) == 0 {
		up = nil
	}
	j.Upstream = up
	return nil
}
