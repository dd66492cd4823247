package statemodel

// BackfillState is where a backfill stands (docs/api.md, "Backfill"):
// RUNNING while it has slots to release or runs unfinished, then
// SUCCEEDED (every run succeeded), FAILED (one failed) or CANCELLED
// (cancelled, or one run cancelled and none failed). A cancelled backfill
// is CANCELLED at once, while its runs' cancels take effect.
type BackfillState string

const (
	BackfillRunning   BackfillState = "RUNNING"
	BackfillSucceeded BackfillState = "SUCCEEDED"
	BackfillFailed    BackfillState = "FAILED"
	BackfillCancelled BackfillState = "CANCELLED"
)

// AllBackfillStates lists every backfill state.
func AllBackfillStates() []BackfillState {
	return []BackfillState{BackfillRunning, BackfillSucceeded, BackfillFailed, BackfillCancelled}
}

// DeriveBackfillState derives a backfill's state from what it holds:
// unfinished (slots to release or runs not ended), whether it was
// cancelled, and how many of its runs failed or were cancelled.
func DeriveBackfillState(unfinished, cancelRequested bool, failed, cancelled int) BackfillState {
	switch {
	case cancelRequested:
		return BackfillCancelled
	case unfinished:
		return BackfillRunning
	case failed > 0:
		return BackfillFailed
	case cancelled > 0:
		return BackfillCancelled
	}
	return BackfillSucceeded
}
