package statemodel

import "time"

// Trigger names what created a run. Every run answer carries it
// (docs/api.md, "Runs"); the store keeps it on the run item.
type Trigger string

const (
	// TriggerSchedule: the job's schedule fired a slot (cron, rate or at).
	TriggerSchedule Trigger = "schedule"
	// TriggerManual: POST /v1/jobs/{job}/runs.
	TriggerManual Trigger = "manual"
	// TriggerBackfill: a backfill released the run for one of its slots;
	// such a run also names its backfill.
	TriggerBackfill Trigger = "backfill"
	// TriggerCatchup: a slot the schedule missed, run by the job's catch-up
	// policy.
	TriggerCatchup Trigger = "catchup"
	// TriggerEvent: an event matched one of the job's on_event entries;
	// such a run also names its event.
	TriggerEvent Trigger = "event"
)

// AllTriggers lists every trigger.
func AllTriggers() []Trigger {
	return []Trigger{TriggerSchedule, TriggerManual, TriggerBackfill, TriggerCatchup, TriggerEvent}
}

// Valid reports whether t is one of AllTriggers.
func (t Trigger) Valid() bool {
	for _, v := range AllTriggers() {
		if t == v {
			return true
		}
	}
	return false
}

// A run's logical time lies in the years 1970 to 9999, whatever gives it
// (a backfill's range, a manual trigger's logical_time, a trigger event's
// time): at or after EarliestLogicalTime and before LatestLogicalTime.
// A time outside them is no business time (0001-01-01 is an unset
// time), so it is refused rather than stored.
var (
	EarliestLogicalTime = time.Unix(0, 0).UTC()
	LatestLogicalTime   = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
)

// LogicalTimeRange is the range in words, for refusals.
const LogicalTimeRange = "the years 1970 to 9999"

// LogicalTimeInRange reports whether t may be a run's logical time.
func LogicalTimeInRange(t time.Time) bool {
	return !t.Before(EarliestLogicalTime) && t.Before(LatestLogicalTime)
}
