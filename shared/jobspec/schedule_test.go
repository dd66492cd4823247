package jobspec_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func cronJob(t *testing.T, expr, zone string) jobspec.Job {
	t.Helper()
	return mustParse(t, fmt.Sprintf(`{"name": "c", "schedule": {"cron": %q, "timezone": %q}}`, expr, zone))
}

// TestNextFireCron walks successive fires of cron schedules, across time
// zones and both daylight saving changes. The times in the comments are
// local.
func TestNextFireCron(t *testing.T) {
	cases := []struct {
		name, cron, zone string
		after            string
		want             []string
	}{
		{"Shanghai 02:00 is 18:00 UTC the day before", "0 2 * * *", "Asia/Shanghai", "2026-03-01T12:00:00Z",
			[]string{"2026-03-01T18:00:00Z", "2026-03-02T18:00:00Z"}},
		{"strictly after a slot", "0 2 * * *", "Asia/Shanghai", "2026-03-01T18:00:00Z",
			[]string{"2026-03-02T18:00:00Z"}},
		{"UTC by default", "0 2 * * *", "", "2026-03-01T01:59:59Z",
			[]string{"2026-03-01T02:00:00Z", "2026-03-02T02:00:00Z"}},
		{"@hourly", "@hourly", "UTC", "2026-03-01T12:34:56Z",
			[]string{"2026-03-01T13:00:00Z", "2026-03-01T14:00:00Z"}},
		// 2026-03-01 is a Sunday; @weekly is Sunday 00:00.
		{"@weekly", "@weekly", "UTC", "2026-03-01T12:00:00Z",
			[]string{"2026-03-08T00:00:00Z", "2026-03-15T00:00:00Z"}},
		{"@monthly in Tokyo", "@monthly", "Asia/Tokyo", "2026-03-01T12:00:00Z",
			[]string{"2026-03-31T15:00:00Z", "2026-04-30T15:00:00Z"}},
		// Berlin moves from CET (+1) to CEST (+2) on 2026-03-29.
		{"@daily across Berlin's change", "@daily", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"}},

		// New York: 2025-03-09 02:00 EST becomes 03:00 EDT (07:00 UTC).
		// 02:30 on 03-08 (EST), then the skipped 02:30 fires when the jump
		// ends (03:00 EDT), then 02:30 EDT.
		{"skipped slot fires at the jump's end", "30 2 * * *", "America/New_York", "2025-03-08T00:00:00Z",
			[]string{"2025-03-08T07:30:00Z", "2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"}},
		{"several skipped slots fire once", "*/20 2 * * *", "America/New_York", "2025-03-09T06:00:00Z",
			[]string{"2025-03-09T07:00:00Z", "2025-03-10T06:00:00Z", "2025-03-10T06:20:00Z"}},
		{"a skipped slot and the next hour's slot fire once", "0 2,3 * * *", "America/New_York", "2025-03-09T05:00:00Z",
			[]string{"2025-03-09T07:00:00Z", "2025-03-10T06:00:00Z", "2025-03-10T07:00:00Z"}},
		// 2025-11-02 02:00 EDT becomes 01:00 EST (06:00 UTC): 01:00-02:00
		// happens twice. 01:30 fires at its first occurrence only.
		{"repeated slot fires once", "30 1 * * *", "America/New_York", "2025-11-01T12:00:00Z",
			[]string{"2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"}},
		{"from inside the repeated hour", "30 1 * * *", "America/New_York", "2025-11-02T06:10:00Z",
			[]string{"2025-11-03T06:30:00Z"}},
		{"the slot after the repeated hour", "0 2 * * *", "America/New_York", "2025-11-02T05:50:00Z",
			[]string{"2025-11-02T07:00:00Z", "2025-11-03T07:00:00Z"}},
		// Every-hour expressions follow elapsed time.
		{"hourly fires in both passes of the repeated hour", "0 * * * *", "America/New_York", "2025-11-02T04:30:00Z",
			[]string{"2025-11-02T05:00:00Z", "2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z"}},
		{"half-hourly runs through the jump", "*/30 * * * *", "America/New_York", "2025-03-09T06:10:00Z",
			[]string{"2025-03-09T06:30:00Z", "2025-03-09T07:00:00Z", "2025-03-09T07:30:00Z"}},
		// Lord Howe jumps half an hour: 2025-10-05 02:00 (+10:30) becomes
		// 02:30 (+11), 15:30 UTC.
		{"half-hour jump", "15 2 * * *", "Australia/Lord_Howe", "2025-10-04T12:00:00Z",
			[]string{"2025-10-04T15:30:00Z", "2025-10-05T15:15:00Z"}},
		// Sydney: 2026-04-05 03:00 AEDT (+11) becomes 02:00 AEST (+10).
		{"southern fall back", "30 2 * * *", "Australia/Sydney", "2026-04-04T12:00:00Z",
			[]string{"2026-04-04T15:30:00Z", "2026-04-05T16:30:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			j := cronJob(t, c.cron, c.zone)
			after := utc(c.after)
			for i, w := range c.want {
				got, ok := j.NextFire(after)
				if !ok || !got.Equal(utc(w)) || got.Location() != time.UTC {
					t.Fatalf("fire %d after %s = %v %v, want %s", i+1, after.Format(time.RFC3339), got, ok, w)
				}
				after = got
			}
		})
	}
}

var dstZones = []string{
	"America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe",
	"America/Santiago", "America/Havana", "Africa/Casablanca", "Asia/Kathmandu", "UTC",
}

// TestCronWallSlotsOncePerDay: an expression at a fixed time of day fires
// exactly once on every local date for three years in zones with every kind
// of change (at 02:00, at midnight, by half an hour, Casablanca's twice a
// year around Ramadan), and fires at its wall time except when the clocks
// jumped over it, where it fires at the jump.
func TestCronWallSlotsOncePerDay(t *testing.T) {
	// Walk a little beyond the checked dates on both sides, whatever the
	// zone's offset.
	from, to := utc("2023-12-29T00:00:00Z"), utc("2027-01-03T00:00:00Z")
	for _, zone := range dstZones {
		for _, expr := range []string{"0 0 * * *", "30 2 * * *", "0 1 * * *", "59 1 * * *", "15 3 * * *", "45 23 * * *"} {
			t.Run(zone+"/"+expr, func(t *testing.T) {
				t.Parallel()
				j := cronJob(t, expr, zone)
				loc := j.Schedule.Location
				var hour, minute int
				if _, err := fmt.Sscanf(expr, "%d %d", &minute, &hour); err != nil {
					t.Fatal(err)
				}
				days := map[string]int{}
				prev := from
				for {
					next, ok := j.NextFire(prev)
					if !ok {
						t.Fatalf("no fire after %s", prev)
					}
					if !next.After(prev) {
						t.Fatalf("fire %s not after %s", next, prev)
					}
					if next.After(to) {
						break
					}
					local := next.In(loc)
					days[local.Format("2006-01-02")]++
					if local.Hour() != hour || local.Minute() != minute {
						// Only a slot the clocks jumped over fires elsewhere,
						// and then at the jump itself.
						_, before := next.Add(-time.Second).In(loc).Zone()
						_, atFire := local.Zone()
						if atFire <= before {
							t.Errorf("fire at %s (%s) is neither the slot nor a jump forward", next, local)
						}
					}
					prev = next
				}
				for d := utc("2024-01-01T00:00:00Z"); d.Year() < 2027; d = d.AddDate(0, 0, 1) {
					key := d.Format("2006-01-02")
					if days[key] != 1 {
						t.Errorf("%s fired %d times on %s", expr, days[key], key)
					}
				}
			})
		}
	}
}

// TestCronEveryHourElapsed: an every-hour expression keeps its period in
// elapsed time through every change of 2024-2026 (walked from a day before
// each change to two days after it).
func TestCronEveryHourElapsed(t *testing.T) {
	for _, zone := range dstZones {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			j := cronJob(t, "*/15 * * * *", zone)
			loc := j.Schedule.Location
			changes := 0
			for day := utc("2024-01-01T00:00:00Z"); day.Year() < 2027; day = day.Add(24 * time.Hour) {
				_, today := day.In(loc).Zone()
				_, tomorrow := day.Add(24 * time.Hour).In(loc).Zone()
				if today == tomorrow {
					continue
				}
				changes++
				prev, ok := j.NextFire(day.Add(-24 * time.Hour))
				for end := day.Add(72 * time.Hour); ok && prev.Before(end); {
					next, more := j.NextFire(prev)
					if !more || next.Sub(prev) != 15*time.Minute {
						t.Fatalf("after %s (%s) the next fire is %s %v", prev, prev.In(loc), next, more)
					}
					prev = next
				}
			}
			if zone != "UTC" && zone != "Asia/Kathmandu" && changes < 6 {
				t.Errorf("only %d changes found in three years", changes)
			}
		})
	}
}

func TestNextFireRate(t *testing.T) {
	j := mustParse(t, `{"name": "r", "schedule": {"rate": "5m"}}`)
	created := utc("2026-03-01T12:00:00Z").Add(123456789 * time.Nanosecond)
	first, ok := j.FireAfter(created, time.Time{})
	// One period after creation, to the millisecond.
	if want := utc("2026-03-01T12:05:00Z").Add(123 * time.Millisecond); !ok || !first.Equal(want) {
		t.Fatalf("first fire = %s %v, want %s", first, ok, want)
	}
	second, ok := j.FireAfter(created, first)
	if !ok || second.Sub(first) != 5*time.Minute {
		t.Fatalf("second fire = %s %v, want one period after %s", second, ok, first)
	}
	if next, _ := j.NextFire(second); next.Sub(second) != 5*time.Minute {
		t.Errorf("NextFire(%s) = %s", second, next)
	}
}

func TestNextFireAt(t *testing.T) {
	j := mustParse(t, `{"name": "once", "schedule": {"at": "2026-03-01T15:30:00.250+01:00"}}`)
	at := utc("2026-03-01T14:30:00.25Z")
	created := now
	fire, ok := j.FireAfter(created, time.Time{})
	if !ok || !fire.Equal(at) {
		t.Fatalf("fire = %s %v, want %s", fire, ok, at)
	}
	if next, ok := j.FireAfter(created, fire); ok {
		t.Errorf("an at job fired again at %s", next)
	}
	if _, ok := j.NextFire(at.Add(time.Millisecond)); ok {
		t.Error("an at job fires after its time")
	}
	if got, ok := j.NextFire(at.Add(-time.Millisecond)); !ok || !got.Equal(at) {
		t.Errorf("NextFire just before = %s %v", got, ok)
	}
}

func TestNextFireManual(t *testing.T) {
	j := mustParse(t, `{"name": "m"}`)
	for _, after := range []time.Time{{}, now, now.AddDate(10, 0, 0)} {
		if got, ok := j.NextFire(after); ok || !got.IsZero() {
			t.Errorf("manual NextFire(%s) = %s %v", after, got, ok)
		}
	}
	if _, ok := j.FireAfter(now, time.Time{}); ok {
		t.Error("manual job has a first fire")
	}
}

// TestNextFireHandBuilt: a Schedule built without Parse (no parsed state)
// still computes the same fires.
func TestNextFireHandBuilt(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	s := jobspec.Schedule{Kind: jobspec.ScheduleCron, Cron: "30 2 * * *", Location: ny}
	got, ok := s.Next(utc("2025-03-09T05:00:00Z"))
	if want := utc("2025-03-09T07:00:00Z"); !ok || !got.Equal(want) {
		t.Errorf("Next = %s %v, want %s", got, ok, want)
	}
	if _, ok := (jobspec.Schedule{Kind: jobspec.ScheduleCron, Cron: "nonsense"}).Next(now); ok {
		t.Error("a bad hand-built cron fires")
	}
	if _, ok := (jobspec.Schedule{}).Next(now); ok {
		t.Error("the zero schedule fires")
	}
}

func TestSlotsIn(t *testing.T) {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	cronAt := func(expr string, loc *time.Location) jobspec.Schedule {
		return jobspec.Schedule{Kind: jobspec.ScheduleCron, Cron: expr, Location: loc}
	}
	for _, c := range []struct {
		name     string
		s        jobspec.Schedule
		from, to time.Time
		anchor   time.Time
		max      int
		first    time.Time
		n        int
		more     bool
	}{
		{"daily from a slot, to excluded", cronAt("0 0 * * *", nil), day, day.AddDate(0, 0, 30), time.Time{}, 1000, day, 30, false},
		{"daily in the job's zone", cronAt("0 2 * * *", sh), day, day.AddDate(0, 0, 3), time.Time{}, 1000, day.Add(18 * time.Hour), 3, false},
		{"more than max", cronAt("* * * * *", nil), day, day.Add(2 * time.Hour), time.Time{}, 100, day, 100, true},
		{"rate on the anchor's grid", jobspec.Schedule{Kind: jobspec.ScheduleRate, Rate: 90 * time.Minute}, day, day.Add(6 * time.Hour), day.Add(45*time.Minute + 30*24*time.Hour), 1000, day.Add(45 * time.Minute), 4, false},
		{"at inside", jobspec.Schedule{Kind: jobspec.ScheduleAt, At: day.Add(time.Hour)}, day, day.Add(2 * time.Hour), time.Time{}, 1000, day.Add(time.Hour), 1, false},
		{"at outside", jobspec.Schedule{Kind: jobspec.ScheduleAt, At: day.Add(3 * time.Hour)}, day, day.Add(2 * time.Hour), time.Time{}, 1000, time.Time{}, 0, false},
		{"manual", jobspec.Schedule{}, day, day.Add(2 * time.Hour), time.Time{}, 1000, time.Time{}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, more := c.s.SlotsIn(c.from, c.to, c.anchor, c.max)
			if len(got) != c.n || more != c.more {
				t.Fatalf("%d slots (more %t), want %d (more %t): %v", len(got), more, c.n, c.more, got)
			}
			if c.n > 0 && !got[0].Equal(c.first) {
				t.Fatalf("first slot %s, want %s", got[0], c.first)
			}
			for i := 1; i < len(got); i++ {
				if !got[i-1].Before(got[i]) || got[i].Before(c.from) || !got[i].Before(c.to) {
					t.Fatalf("slots out of order or range: %v", got)
				}
			}
		})
	}
}

// A rate schedule's slots far from its anchor (thousands of years, before
// or after) are on the anchor's grid, computed at once.
func TestSlotsInFarFromTheAnchor(t *testing.T) {
	rate := func(d time.Duration) jobspec.Schedule { return jobspec.Schedule{Kind: jobspec.ScheduleRate, Rate: d} }
	y10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)

	// Weekly from a Monday 09:30:00.250: the slots of December 9999 are its
	// Mondays at that time.
	anchor := time.Date(2026, 1, 5, 9, 30, 0, 250e6, time.UTC)
	from := time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC)
	var mondays []time.Time
	for d := from; d.Before(y10000); d = d.AddDate(0, 0, 1) {
		if d.Weekday() == time.Monday {
			mondays = append(mondays, d.Add(9*time.Hour+30*time.Minute+250*time.Millisecond))
		}
	}
	got, more := rate(7*24*time.Hour).SlotsIn(from, y10000, anchor, 1000)
	if more || fmt.Sprint(got) != fmt.Sprint(mondays) {
		t.Errorf("weekly in December 9999: %v (more %t), want %v", got, more, mondays)
	}

	for _, c := range []struct {
		name             string
		period           time.Duration
		anchor, from, to time.Time
		want             []string
	}{
		{"every minute in year 4000, from between slots", time.Minute, utc("2026-05-17T08:00:00Z"),
			utc("4000-06-01T00:00:30Z"), utc("4000-06-01T00:03:30Z"),
			[]string{"4000-06-01T00:01:00Z", "4000-06-01T00:02:00Z", "4000-06-01T00:03:00Z"}},
		{"from on a slot", time.Minute, utc("2026-05-17T08:00:00Z"),
			utc("9999-12-31T23:58:00Z"), y10000,
			[]string{"9999-12-31T23:58:00Z", "9999-12-31T23:59:00Z"}},
		{"before the anchor", time.Hour, utc("2026-01-01T00:15:00Z"),
			utc("1970-01-01T00:00:00Z"), utc("1970-01-01T03:00:00Z"),
			[]string{"1970-01-01T00:15:00Z", "1970-01-01T01:15:00Z", "1970-01-01T02:15:00Z"}},
		{"odd period", 7 * time.Second, utc("2026-01-01T00:00:00Z"),
			utc("3026-01-01T00:00:00Z"), utc("3026-01-01T00:00:15Z"),
			// 2026 to 3026 holds 365,242 days: 365,242 * 86,400 s = 7 * 4,508,129,828 s + 4 s.
			[]string{"3026-01-01T00:00:03Z", "3026-01-01T00:00:10Z"}},
	} {
		got, more := rate(c.period).SlotsIn(c.from, c.to, c.anchor, 1000)
		var text []string
		for _, s := range got {
			text = append(text, s.Format(time.RFC3339Nano))
		}
		if more || fmt.Sprint(text) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v (more %t), want %v", c.name, text, more, c.want)
		}
	}

	got, _ = (jobspec.Schedule{Kind: jobspec.ScheduleCron, Cron: "0 0 * * *"}).SlotsIn(utc("9999-12-29T12:00:00Z"), y10000, time.Time{}, 1000)
	if fmt.Sprint(got) != fmt.Sprint([]time.Time{utc("9999-12-30T00:00:00Z"), utc("9999-12-31T00:00:00Z")}) {
		t.Errorf("daily cron at the end of year 9999: %v", got)
	}
}
