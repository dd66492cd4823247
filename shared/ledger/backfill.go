package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// Backfill limits (docs/api.md, "Backfill").
const (
	MaxBackfillSlots  = 1000
	MaxBackfillActive = 100
)

// BackfillRun is a run a backfill released for one of its slots and has
// not seen end yet.
type BackfillRun struct {
	Run  string
	Slot time.Time
}

// Backfill is a backfill item: the slots of a range it has still to
// release (Pending, oldest first), the runs it released that have not
// ended (Active, at most MaxActive), and what became of the others. Every
// slot of the range is in exactly one place:
//
//	Slots = Existing + len(Pending) + len(Active) + Succeeded + Failed + Cancelled
//
// Existing counts the slots that had a run already (found when the
// backfill was posted, or when a release found the slot taken);
// Cancelled counts runs that ended CANCELLED and pending slots dropped by
// a cancel. Its State is derived (statemodel.DeriveBackfillState) and
// stored with every write, which is a compare-and-set on Version.
type Backfill struct {
	ID        string // a ULID, so backfill ids sort by creation time
	Job       string
	From, To  time.Time
	MaxActive int
	Params    []byte // opaque JSON, the params of every run it releases

	Slots           int
	Existing        int
	Pending         []time.Time
	Active          []BackfillRun
	Succeeded       int
	Failed          int
	Cancelled       int
	CancelRequested bool

	State     statemodel.BackfillState
	CreatedAt time.Time
	EndedAt   time.Time
	Version   int64
	// TimerAt is the backstop while the backfill is unfinished: the
	// ticker settles its runs and releases its slots then, should every
	// path that does so at once have failed.
	TimerAt time.Time
	// WakeAt asks a write for a backstop no later than this: the written
	// TimerAt is the earlier of WakeAt and the store's clock + backstop.
	// It is not stored; a caller that stopped releasing with slots still
	// releasable sets it to now, so the next tick goes on.
	WakeAt time.Time
	// Priority is its runs' priority (1..5); 0: the job's plus one.
	Priority int
}

// Created is the number of runs the backfill starts (or started).
func (b Backfill) Created() int { return b.Slots - b.Existing }

// Unfinished reports whether the backfill has slots to release or runs
// that have not ended.
func (b Backfill) Unfinished() bool { return len(b.Pending) > 0 || len(b.Active) > 0 }

// CheckNewBackfill refuses a backfill CreateBackfill must not write: bad
// keys, max_active outside 1..MaxBackfillActive, more than
// MaxBackfillSlots slots, pending slots out of order or outside the range,
// counts that do not add up, or one that released or ended anything yet.
func CheckNewBackfill(b Backfill) error {
	if err := checkBackfill(b.ID); err != nil {
		return err
	}
	if err := checkJob(b.Job); err != nil {
		return err
	}
	switch {
	case !b.From.Before(b.To):
		return fmt.Errorf("%w: backfill range [%s, %s) is empty", ErrInvalidInput, FormatTime(b.From), FormatTime(b.To))
	case b.Slots > MaxBackfillSlots:
		return fmt.Errorf("%w: %d slots, at most %d", ErrInvalidInput, b.Slots, MaxBackfillSlots)
	case len(b.Active) > 0 || b.Succeeded+b.Failed+b.Cancelled > 0 || b.CancelRequested:
		return fmt.Errorf("%w: a new backfill has released and ended nothing", ErrInvalidInput)
	}
	for i, t := range b.Pending {
		if t.Before(b.From) || !t.Before(b.To) || (i > 0 && !b.Pending[i-1].Before(t)) {
			return fmt.Errorf("%w: pending slot %s out of order or outside the range", ErrInvalidInput, FormatTime(t))
		}
	}
	return checkBackfillCounts(b)
}

// CheckBackfillCounts refuses a backfill whose max_active or counts are
// out of bounds or do not add up to its slots (UpdateBackfill).
func CheckBackfillCounts(b Backfill) error { return checkBackfillCounts(b) }

func checkBackfillCounts(b Backfill) error {
	switch {
	case b.MaxActive < 1 || b.MaxActive > MaxBackfillActive:
		return fmt.Errorf("%w: max_active %d outside 1..%d", ErrInvalidInput, b.MaxActive, MaxBackfillActive)
	case len(b.Active) > b.MaxActive:
		return fmt.Errorf("%w: %d runs active, at most %d", ErrInvalidInput, len(b.Active), b.MaxActive)
	case b.Existing < 0 || b.Succeeded < 0 || b.Failed < 0 || b.Cancelled < 0:
		return fmt.Errorf("%w: negative backfill count", ErrInvalidInput)
	case b.Slots != b.Existing+len(b.Pending)+len(b.Active)+b.Succeeded+b.Failed+b.Cancelled:
		return fmt.Errorf("%w: backfill %s counts %d slots but holds %d", ErrInvalidInput, b.ID, b.Slots,
			b.Existing+len(b.Pending)+len(b.Active)+b.Succeeded+b.Failed+b.Cancelled)
	}
	return nil
}

// NextBackfill is b as a write stores it: its state derived, its end time
// set when it ended (stamp), its backstop moved to stamp + backstop (or
// b.WakeAt, when earlier) while unfinished, and the next version.
func NextBackfill(b Backfill, stamp time.Time, backstop time.Duration) Backfill {
	next := b
	next.Pending = slices.Clone(b.Pending)
	next.Active = slices.Clone(b.Active)
	next.State = statemodel.DeriveBackfillState(b.Unfinished(), b.CancelRequested, b.Failed, b.Cancelled)
	next.TimerAt, next.WakeAt = time.Time{}, time.Time{}
	if b.Unfinished() {
		next.TimerAt = stamp.Add(backstop)
		if !b.WakeAt.IsZero() && b.WakeAt.Before(next.TimerAt) {
			next.TimerAt = b.WakeAt
		}
	} else if next.EndedAt.IsZero() {
		next.EndedAt = stamp
	}
	next.Version = b.Version + 1
	return next
}

// ReleaseNext is b after releasing its oldest pending slot as run: the
// slot leaves Pending and the run joins Active. It refuses (ErrInvalidInput)
// a release of a cancelled backfill, of one with nothing pending, or one
// past max_active: so a release decided from a copy that is still current
// (the write's condition) never exceeds max_active.
func ReleaseNext(b Backfill, run string, slot time.Time) (Backfill, error) {
	switch {
	case b.CancelRequested:
		return b, fmt.Errorf("%w: backfill %s is cancelled", ErrInvalidInput, b.ID)
	case len(b.Pending) == 0 || !b.Pending[0].Equal(slot):
		return b, fmt.Errorf("%w: %s is not backfill %s's oldest pending slot", ErrInvalidInput, FormatTime(slot), b.ID)
	case len(b.Active) >= b.MaxActive:
		return b, fmt.Errorf("%w: backfill %s has %d runs active, at most %d", ErrInvalidInput, b.ID, len(b.Active), b.MaxActive)
	}
	next := b
	next.Pending = slices.Clone(b.Pending[1:])
	next.Active = append(slices.Clone(b.Active), BackfillRun{Run: run, Slot: slot})
	return next, nil
}

const (
	timerKindBackfill = "backfill_backstop"
)

// TimerKindBackfill is the timer kind of a backfill's backstop.
const TimerKindBackfill = timerKindBackfill

const MaxBackfillIDBytes = MaxSortKeyBytes - len("BACKFILL#") // the store's backfill key

func checkBackfill(id string) error { return CheckName("backfill", id, MaxBackfillIDBytes) }

// CheckBackfillID validates a backfill id (InvalidKeyError).
func CheckBackfillID(id string) error { return checkBackfill(id) }

// CheckRelease refuses a new run that releases a backfill's slot unless it
// is that backfill's run of its oldest pending slot, claims the slot, and
// the backfill (as held) may release it now (ReleaseNext). It returns the
// backfill as the release leaves it, before the write's stamp.
func CheckRelease(nr NewRun) (Backfill, error) {
	b := *nr.Release
	switch {
	case nr.Trigger != statemodel.TriggerBackfill || nr.BackfillID != b.ID:
		return b, fmt.Errorf("%w: a release of backfill %s is a backfill run naming it", ErrInvalidInput, b.ID)
	case !nr.ClaimSlot || nr.MarkSlot:
		return b, fmt.Errorf("%w: a backfill run claims its slot", ErrInvalidInput)
	case nr.Job != b.Job:
		return b, fmt.Errorf("%w: backfill %s is of job %s, not %s", ErrInvalidInput, b.ID, b.Job, nr.Job)
	}
	return ReleaseNext(b, nr.ID, nr.LogicalTime)
}
