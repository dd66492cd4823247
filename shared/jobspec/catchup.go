package jobspec

import (
	"encoding/json"
	"slices"
	"time"
)

// Catchup says what a schedule does with the slots it missed: those that
// fell while the job was paused, and those the ticker first saw too late
// (it was down, or behind).
type Catchup string

const (
	// CatchupLatest starts one run, for the latest missed slot inside the
	// window. The default.
	CatchupLatest Catchup = "latest"
	// CatchupNone starts no run for a missed slot.
	CatchupNone Catchup = "none"
	// CatchupAll starts one run per missed slot inside the window, at most
	// MaxCatchupRuns (the newest), oldest first.
	CatchupAll Catchup = "all"
)

// AllCatchups lists every catch-up policy, the default first.
func AllCatchups() []Catchup { return []Catchup{CatchupLatest, CatchupNone, CatchupAll} }

// Limits and defaults of catch-up.
const (
	// DefaultCatchupWindow is schedule.catchup_window when a job sets none:
	// missed slots older than this are never run.
	DefaultCatchupWindow = 24 * time.Hour
	// MaxCatchupWindow bounds schedule.catchup_window (a year).
	MaxCatchupWindow = 8760 * time.Hour
	// MaxCatchupRuns bounds the runs one catch-up of policy all starts: the
	// newest missed slots inside the window.
	MaxCatchupRuns = 1000
)

// readCatchup reads schedule.catchup and schedule.catchup_window into s,
// filling the defaults.
func readCatchup(d *decoder, m map[string]json.RawMessage, s *Schedule) {
	s.Catchup, s.CatchupWindow = CatchupLatest, DefaultCatchupWindow
	if raw := get(m, "catchup"); raw != nil {
		s.Catchup = Catchup(d.str(raw, "schedule.catchup"))
		if d.err == nil && !slices.Contains(AllCatchups(), s.Catchup) {
			d.fail(fieldError("schedule.catchup", `must be "latest", "none" or "all", not %q`, s.Catchup))
		}
	}
	if raw := get(m, "catchup_window"); raw != nil {
		s.CatchupWindow = d.positive(raw, "schedule.catchup_window")
		if d.err == nil && s.CatchupWindow > MaxCatchupWindow {
			d.fail(fieldError("schedule.catchup_window", "must be at most %s, not %s",
				FormatDuration(MaxCatchupWindow), FormatDuration(s.CatchupWindow)))
		}
	}
}

// CatchupPolicy is the schedule's catch-up policy, the default when unset
// (a Schedule not built by Parse or Load).
func (s Schedule) CatchupPolicy() Catchup {
	if s.Catchup == "" {
		return CatchupLatest
	}
	return s.Catchup
}

// Window is how far back missed slots are caught up, the default when
// unset.
func (s Schedule) Window() time.Duration {
	if s.CatchupWindow <= 0 {
		return DefaultCatchupWindow
	}
	return s.CatchupWindow
}
