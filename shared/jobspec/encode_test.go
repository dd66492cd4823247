package jobspec_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/protocol"
)

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 90 * time.Second: "1m30s", 10 * time.Minute: "10m", time.Hour: "1h",
		90 * time.Minute: "1h30m", time.Hour + 5*time.Second: "1h0m5s", 1500 * time.Millisecond: "1.5s",
		-10 * time.Minute: "-10m", 48 * time.Hour: "48h",
	} {
		got := jobspec.FormatDuration(d)
		if got != want {
			t.Errorf("FormatDuration(%v) = %s, want %s", d, got, want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != d {
			t.Errorf("%s reads back as %v, %v", got, back, err)
		}
	}
}

func TestJobView(t *testing.T) {
	created := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, body string
		next       time.Time
		wantNext   any
	}{
		{"manual", `{"name": "m"}`, time.Time{}, nil},
		{"cron", `{"name": "c", "schedule": {"cron": "0 2 * * *", "timezone": "Asia/Shanghai"}}`,
			time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC), "2026-03-01T18:00:00.000Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := mustParse(t, c.body)
			v := jobspec.JobView{Job: j, Version: 3, Paused: true, CreatedAt: created, UpdatedAt: created.Add(time.Hour), NextFireTime: c.next, MissedSlots: 7}
			b := marshal(t, v)
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for k, want := range map[string]any{
				"id": j.Name, "name": j.Name, "version": 3.0, "paused": true,
				"created_at": "2026-03-01T11:00:00.000Z", "updated_at": "2026-03-01T12:00:00.000Z", "next_fire_time": c.wantNext,
				"missed_slots": 7.0,
			} {
				got, ok := m[k]
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
				}
			}

			var back jobspec.JobView
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(marshal(t, back), b) || back.Version != 3 || back.MissedSlots != 7 || !back.Paused || !back.CreatedAt.Equal(created) || !back.NextFireTime.Equal(c.next) {
				t.Errorf("view read back as %+v", back)
			}

			// A client that sends the view back as a definition is told why
			// it is refused.
			_, err := jobspec.Parse(b, opts)
			var e *jobspec.Error
			if !errors.As(err, &e) || e.Code != protocol.CodeInvalidField || e.Field != "created_at" {
				t.Errorf("Parse of a view = %v", err)
			}
		})
	}
}
