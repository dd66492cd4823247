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
