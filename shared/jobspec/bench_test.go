package jobspec_test

import (
	"os"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
)

// BenchmarkParseExample parses docs/api.md's example definition, what the API
// does on every POST and PUT.
func BenchmarkParseExample(b *testing.B) {
	body, err := os.ReadFile("testdata/nightly-report.json")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := jobspec.Parse(body, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextFire computes the next fire of a fixed-time cron expression
// (the wall-clock walk) and of an every-hour one (robfig/cron in the zone),
// in a zone with daylight saving time.
func BenchmarkNextFire(b *testing.B) {
	after := time.Date(2025, 3, 9, 5, 0, 0, 0, time.UTC)
	for _, expr := range []string{"30 2 * * *", "*/15 * * * *"} {
		j, err := jobspec.Parse([]byte(`{"name": "c", "schedule": {"cron": "`+expr+`", "timezone": "America/New_York"}}`), opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(expr, func(b *testing.B) {
			for b.Loop() {
				if _, ok := j.NextFire(after); !ok {
					b.Fatal("no fire")
				}
			}
		})
	}
}

// BenchmarkSlotsInFarFuture lists a backfill's slots in year 9999, what
// POST /v1/jobs/{job}/backfill does: 1,000 slots of a one-minute rate job
// created in 2026, and a month of a daily cron job. Each call is meant to
// take well under 10 ms.
func BenchmarkSlotsInFarFuture(b *testing.B) {
	from := time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC)
	anchor := time.Date(2026, 5, 17, 8, 0, 0, 250e6, time.UTC)
	for _, c := range []struct {
		name string
		s    jobspec.Schedule
		to   time.Time
	}{
		{"rate", jobspec.Schedule{Kind: jobspec.ScheduleRate, Rate: time.Minute}, from.Add(1000 * time.Minute)},
		{"cron", jobspec.Schedule{Kind: jobspec.ScheduleCron, Cron: "30 2 * * *"}, from.AddDate(0, 0, 30)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if slots, _ := c.s.SlotsIn(from, c.to, anchor, 1000); len(slots) == 0 {
					b.Fatal("no slot")
				}
			}
		})
	}
}
