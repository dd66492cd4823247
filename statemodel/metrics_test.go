package statemodel

import (
	"testing"
	"time"
)

// TestTransitionLag: observed minus event time; none without an event
// time; a reporter's clock ahead of ours reads as no lag, not a negative one.
func TestTransitionLag(t *testing.T) {
	for _, c := range []struct {
		name        string
		event, seen time.Time
		want        time.Duration
		ok          bool
	}{
		{"late report", t0, t0.Add(1500 * time.Millisecond), 1500 * time.Millisecond, true},
		{"same instant", t0, t0, 0, true},
		{"reporter ahead", t0.Add(time.Second), t0, 0, true},
		{"no event time", time.Time{}, t0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := Transition{EventTime: c.event, ObservedAt: c.seen}.Lag()
			if got != c.want || ok != c.ok {
				t.Errorf("Lag() = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
