package statemodel

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
