package jobspec

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/runledger/runledger/shared/protocol"
)

// ScheduleKind names what starts a job's runs.
type ScheduleKind string

const (
	// ScheduleManual: no schedule; runs start only through the API. The
	// zero Schedule is manual too.
	ScheduleManual ScheduleKind = "manual"
	// ScheduleCron: a cron expression read on the wall clock of a time zone.
	ScheduleCron ScheduleKind = "cron"
	// ScheduleRate: a fixed period, the first fire one period after the job
	// is created.
	ScheduleRate ScheduleKind = "rate"
	// ScheduleAt: one fire at a given time.
	ScheduleAt ScheduleKind = "at"
)

// Schedule is a job's schedule. Only the fields of its Kind are set.
type Schedule struct {
	Kind ScheduleKind
	// Cron is the expression as defined: five fields (minute, hour, day of
	// month, month, day of week) or one of @hourly, @daily, @weekly,
	// @monthly.
	Cron string
	// Location is the zone Cron is read in; nil reads as UTC.
	Location *time.Location
	Rate     time.Duration
	// At is a whole millisecond, UTC.
	At time.Time
	// Catchup and CatchupWindow say what happens to missed slots (set for
	// every kind but manual; see Catchup).
	Catchup       Catchup
	CatchupWindow time.Duration

	// spec is Cron parsed, located in UTC: it is evaluated on wall-clock
	// times, not instants (see nextCron).
	spec *cron.SpecSchedule
}

// Descriptors are the @ forms a cron schedule accepts (docs/api.md,
// "Jobs"). @every is not one of them: that is what rate is for.
var Descriptors = []string{"@hourly", "@daily", "@weekly", "@monthly"}

var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron parses a cron expression runledger accepts: five fields or one
// of Descriptors, without a zone prefix (the zone is schedule.timezone).
func parseCron(expr string) (*cron.SpecSchedule, error) {
	switch {
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, fmt.Errorf("it carries a time zone; put the zone in schedule.timezone")
	case strings.HasPrefix(expr, "@"):
		ok := false
		for _, d := range Descriptors {
			ok = ok || expr == d
		}
		if !ok {
			return nil, fmt.Errorf("the only descriptors are %s", strings.Join(Descriptors, ", "))
		}
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("it is not a calendar schedule")
	}
	spec.Location = time.UTC
	return spec, nil
}

func readSchedule(d *decoder, top map[string]json.RawMessage, j *Job, mode parseMode) {
	raw := get(top, "schedule")
	if raw == nil {
		j.Schedule = Schedule{Kind: ScheduleManual}
		return
	}
	m := d.object(raw, "schedule", "cron", "timezone", "rate", "at", "catchup", "catchup_window")
	if d.err != nil {
		return
	}
	var kinds []string
	for _, k := range []string{"cron", "rate", "at"} {
		if get(m, k) != nil {
			kinds = append(kinds, k)
		}
	}
	zone := get(m, "timezone")
	switch {
	case len(kinds) > 1:
		d.fail(fieldError("schedule", "has %s at once; a schedule is one of cron, rate or at", strings.Join(kinds, " and ")))
		return
	case len(kinds) == 0 && zone != nil:
		d.fail(fieldError("schedule.timezone", "applies to a cron schedule only, and the schedule has no cron"))
		return
	case len(kinds) == 0:
		d.fail(fieldError("schedule", "must have one of cron, rate or at; leave schedule out for a job started only through the API"))
		return
	case kinds[0] != "cron" && zone != nil:
		d.fail(fieldError("schedule.timezone", "applies to a cron schedule only, not to %s", kinds[0]))
		return
	}
	s := Schedule{Kind: ScheduleKind(kinds[0])}
	switch s.Kind {
	case ScheduleCron:
		s.Cron = strings.TrimSpace(d.str(get(m, "cron"), "schedule.cron"))
		name := ""
		if zone != nil {
			name = d.str(zone, "schedule.timezone")
		}
		if d.err != nil {
			return
		}
		spec, err := parseCron(s.Cron)
		if err != nil {
			d.fail(&Error{Code: protocol.CodeInvalidCron, Field: "schedule.cron", Message: sentence("schedule.cron",
				"%q is not a cron expression of five fields (minute hour day-of-month month day-of-week) or a descriptor such as @daily: %v", s.Cron, err)})
			return
		}
		s.spec = spec
		s.Location, err = loadZone(name)
		if err != nil {
			d.fail(&Error{Code: protocol.CodeInvalidTimezone, Field: "schedule.timezone", Message: sentence("schedule.timezone",
				"%q is not an IANA time zone name such as \"Europe/Berlin\" or \"UTC\"", name)})
			return
		}
		if mode.world != nil {
			if _, ok := s.Next(mode.world.Now); !ok {
				d.fail(&Error{Code: protocol.CodeInvalidCron, Field: "schedule.cron", Message: sentence("schedule.cron",
					"%q never fires (no date matches it)", s.Cron)})
				return
			}
		}
	case ScheduleRate:
		s.Rate = d.duration(get(m, "rate"), "schedule.rate")
		switch {
		case d.err != nil:
		case s.Rate < MinRate:
			d.fail(fieldError("schedule.rate", "must be at least %s, not %s", FormatDuration(MinRate), FormatDuration(s.Rate)))
		case s.Rate%time.Second != 0:
			d.fail(fieldError("schedule.rate", "must be a whole number of seconds, not %s", FormatDuration(s.Rate)))
		}
	case ScheduleAt:
		text := d.str(get(m, "at"), "schedule.at")
		if d.err != nil {
			return
		}
		t, err := protocol.ParseTime(text)
		switch {
		case err != nil:
			d.fail(fieldError("schedule.at", "%q is not an RFC 3339 time such as \"2026-01-02T03:04:05.000Z\"", text))
		case mode.world != nil && t.Before(mode.world.Now):
			d.fail(fieldError("schedule.at", "%s is in the past (now is %s)", protocol.FormatTime(t), protocol.FormatTime(mode.world.Now)))
		}
		s.At = t
	}
	if d.err == nil {
		readCatchup(d, m, &s)
	}
	j.Schedule = s
}

// loadZone loads an IANA zone; "" is UTC. "Local" is refused: it would
// mean the zone of whichever machine evaluates the schedule.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("the machine's local zone is not a zone")
	}
	return time.LoadLocation(name)
}

func (s Schedule) location() *time.Location {
	if s.Location == nil {
		return time.UTC
	}
	return s.Location
}

// NextFire is the job's schedule's next fire after the given time; see
// Schedule.Next.
func (j Job) NextFire(after time.Time) (time.Time, bool) { return j.Schedule.Next(after) }

// FireAfter is the fire that follows a job created at created whose last
// fire was prev (zero if it has not fired): NextFire of prev, or of created
// before the first fire. So a rate job first fires one period after it was
// created and then one period after each fire, an at job fires once, and a
// cron job fires at the first slot after creation and then at each slot in
// turn. Pass the logical time of the previous fire, not the time its run was
// started, so a late ticker does not shift the schedule.
func (j Job) FireAfter(created, prev time.Time) (time.Time, bool) {
	anchor := created
	if !prev.IsZero() {
		anchor = prev
	}
	return j.NextFire(anchor)
}

// Next returns the schedule's first fire strictly after the given time, in
// UTC, and false when there is none:
//
//   - manual: never.
//   - at: At, if it is after the given time; so it fires once.
//   - rate: one period after the given time, which is the previous fire, or
//     the creation time before the first fire (see FireAfter), truncated to
//     the millisecond.
//   - cron: the next slot of the expression on the wall clock of Location.
//
// A cron slot is a local date and time: "0 2 * * *" in Asia/Shanghai
// (UTC+8) fires at 18:00 UTC of the previous day. Daylight saving time is
// handled as cron daemons do.
//
// An expression whose hour field names specific hours is about wall time,
// and each of its slots fires exactly once. A slot the clocks jump over fires
// when the jump ends: "30 2 * * *" in America/New_York fires at 03:00 EDT on
// the day 02:00 EST becomes 03:00 EDT (several skipped slots of one jump fire
// together, once). A slot the clocks pass twice fires at its first occurrence
// only: "30 1 * * *" fires at 01:30 EDT, and not again at 01:30 EST.
//
// An expression whose hour field is * (every hour) is about elapsed time: it
// fires at every instant whose local time matches, so "*/15 * * * *" keeps
// firing every 15 minutes through both changes (the repeated hour's slots
// fire twice, the skipped hour has none).
//
// An expression that matches no date within five years (robfig/cron's
// horizon, e.g. "0 0 30 2 *") never fires; Parse refuses it.
func (s Schedule) Next(after time.Time) (time.Time, bool) {
	switch s.Kind {
	case ScheduleCron:
		return s.nextCron(after)
	case ScheduleRate:
		if s.Rate <= 0 {
			return time.Time{}, false
		}
		return after.Add(s.Rate).UTC().Truncate(time.Millisecond), true
	case ScheduleAt:
		if s.At.After(after) {
			return s.At.UTC(), true
		}
	}
	return time.Time{}, false
}

// maxCronSteps bounds the wall-clock walk of nextCron. Each step passes one
// slot that lies at or before the given instant, which happens only for
// slots in a repeated hour or in a jump: a handful per call.
const maxCronSteps = 512

func (s Schedule) nextCron(after time.Time) (time.Time, bool) {
	spec := s.spec
	if spec == nil {
		var err error
		if spec, err = parseCron(s.Cron); err != nil {
			return time.Time{}, false
		}
	}
	loc := s.location()
	if everyHour(spec) {
		local := *spec
		local.Location = loc
		n := local.Next(after)
		return n.UTC(), !n.IsZero()
	}
	// Walk the slots on the wall clock (spec is located in UTC, so it sees
	// wall times with no jumps) and map each to an instant in loc.
	wall := wallClock(after.In(loc))
	for range maxCronSteps {
		w := spec.Next(wall)
		if w.IsZero() {
			return time.Time{}, false
		}
		if t := instantOf(w, loc); t.After(after) {
			return t.UTC(), true
		}
		wall = w
	}
	return time.Time{}, false
}

// everyHour reports whether the hour field matches all 24 hours.
func everyHour(spec *cron.SpecSchedule) bool {
	return bits.OnesCount64(spec.Hour&(1<<24-1)) == 24
}

// wallClock returns t's local date and time as the same fields in UTC.
func wallClock(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instantOf maps a wall-clock time (w's fields, read in loc) to the earliest
// instant at which loc shows it, or, when loc's clocks jump over it, to the
// instant the jump ends.
//
// An instant i shows wall time u when i + offset(i) = u. UTC offsets lie
// between -12h and +14h, so i lies in [u-14h, u+12h]; assuming at most one
// offset change in that window (true of every zone in the tz database in
// practice), the candidates are u minus the offset at either end of it.
func instantOf(w time.Time, loc *time.Location) time.Time {
	u := w.Unix()
	offset := func(i int64) int64 {
		_, o := time.Unix(i, 0).In(loc).Zone()
		return int64(o)
	}
	before, after := offset(u-14*3600), offset(u+12*3600)
	first, found := int64(0), false
	for _, i := range []int64{u - before, u - after} {
		if i+offset(i) == u && (!found || i < first) {
			first, found = i, true
		}
	}
	if found {
		return time.Unix(first, 0)
	}
	if after <= before {
		// Not a jump forward: more than one change in the window. Keep the
		// later offset's reading; unreachable for real zones.
		return time.Unix(u-after, 0)
	}
	// Clocks jumped forward over u: the change lies in (u-after, u-before].
	// Find its instant, the first second showing the later offset.
	lo, hi := u-after, u-before
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offset(mid) == after {
			hi = mid
		} else {
			lo = mid
		}
	}
	return time.Unix(hi, 0)
}

// SlotsIn lists the schedule's fire times in [from, to), oldest first, at
// most max; more reports that the range holds more than max. A cron
// schedule's slots are those Next yields (its zone and daylight saving
// rules included); a rate schedule's are anchor + k * rate for every
// integer k, anchor being one of its fires (the job's next fire), so a
// backfill lands on the same grid the schedule fires on; an at schedule
// has its one time. A manual schedule has none.
func (s Schedule) SlotsIn(from, to, anchor time.Time, max int) (slots []time.Time, more bool) {
	add := func(t time.Time) bool {
		if len(slots) == max {
			more = true
			return false
		}
		slots = append(slots, t.UTC())
		return true
	}
	switch s.Kind {
	case ScheduleCron:
		for t, ok := s.Next(from.Add(-time.Nanosecond)); ok && t.Before(to); t, ok = s.Next(t) {
			if !add(t) {
				break
			}
		}
	case ScheduleRate:
		if s.Rate <= 0 {
			return nil, false
		}
		for t := firstOnGrid(anchor, s.Rate, from); t.Before(to); t = t.Add(s.Rate) {
			if !add(t) {
				break
			}
		}
	case ScheduleAt:
		if !s.At.Before(from) && s.At.Before(to) {
			add(s.At)
		}
	}
	return slots, more
}

// nanosPerSecond is a second in nanoseconds, as a big integer.
var nanosPerSecond = big.NewInt(int64(time.Second))

// firstOnGrid is the first instant at or after from of the grid anchor + k *
// period (k any integer, period > 0). It computes k directly, in integers
// wide enough for any two times: a time.Duration spans 292 years only, and
// stepping a period at a time from a saturated duration would take minutes
// for a range thousands of years from the anchor.
func firstOnGrid(anchor time.Time, period time.Duration, from time.Time) time.Time {
	a := unixNanos(anchor)
	p := big.NewInt(int64(period))
	// k = ceil((from - anchor) / period); DivMod leaves a remainder in
	// [0, period), whatever the sign of the difference.
	k, rem := new(big.Int).DivMod(new(big.Int).Sub(unixNanos(from), a), p, new(big.Int))
	if rem.Sign() != 0 {
		k.Add(k, big.NewInt(1))
	}
	sec, nsec := new(big.Int).DivMod(k.Mul(k, p).Add(k, a), nanosPerSecond, new(big.Int))
	return time.Unix(sec.Int64(), nsec.Int64()).UTC()
}

// unixNanos is t in nanoseconds since the Unix epoch, without overflow.
func unixNanos(t time.Time) *big.Int {
	n := new(big.Int).Mul(big.NewInt(t.Unix()), nanosPerSecond)
	return n.Add(n, big.NewInt(int64(t.Nanosecond())))
}
