package protocol_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// DecodeEvent is the events handler's one reader: it tells the three kinds
// apart and validates each, so what it returns can be applied as is.
func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	const ok = `"run":"r","task":"t","attempt":1,"event_id":"e1","outcome":"succeeded","token":"k"`
	good := []struct {
		name, body string
		check      func(protocol.Event) bool
	}{
		{"completion", `{` + ok + `,"event_time":"2030-01-02T03:04:05.678+01:00"}`, func(e protocol.Event) bool {
			c := e.Completion
			return c != nil && e.Lease == nil && e.Timer == nil && c.Token == "k" && c.Outcome == protocol.OutcomeSucceeded &&
				c.EventTime.Equal(time.Date(2030, 1, 2, 2, 4, 5, 678_000_000, time.UTC))
		}},
		{"lease", `{"kind":"worker_lease","worker":"w","boot_id":"b","expires_at":"2030-01-02T03:04:05Z","running":[{"run":"r","task":"t","attempt":2}]}`,
			func(e protocol.Event) bool {
				l := e.Lease
				return l != nil && e.Completion == nil && l.WorkerID() == "w@b" && len(l.Running) == 1 && l.Running[0].Attempt == 2 && l.SentAt.IsZero()
			}},
		{"instance timer", `{"kind":"timer","run":"r","task":"t","at":"2030-01-02T03:04:05.000Z"}`, func(e protocol.Event) bool {
			return e.Timer != nil && e.Timer.Run == "r" && e.Timer.Task == "t" && e.Completion == nil
		}},
		{"run timer", `{"kind":"timer","run":"r","at":"2030-01-02T03:04:05.000Z"}`, func(e protocol.Event) bool {
			return e.Timer != nil && e.Timer.Task == ""
		}},
	}
	for _, c := range good {
		ev, err := protocol.DecodeEvent(c.body)
		if err != nil || !c.check(ev) {
			t.Errorf("%s: DecodeEvent = %+v, %v", c.name, ev, err)
		}
	}
	bad := []struct {
		name, body string
		field      string // the *FieldError's field; "" for an error of another kind
		tooLarge   bool
	}{
		{"not JSON", `{"run":`, "", false},
		{"unknown kind", `{"kind":"gossip","run":"r"}`, "kind", false},
		{"completion without event id", `{"run":"r","task":"t","attempt":1,"outcome":"failed"}`, "event_id", false},
		{"completion with a scheduler id", `{"run":"r","task":"t","attempt":1,"event_id":"dispatch:1","outcome":"failed"}`, "event_id", false},
		{"completion of attempt 0", `{"run":"r","task":"t","attempt":0,"event_id":"e","outcome":"failed"}`, "attempt", false},
		{"completion without run", `{"task":"t","attempt":1,"event_id":"e","outcome":"failed"}`, "run", false},
		{"completion with a bad outcome", `{` + strings.Replace(ok, "succeeded", "done", 1) + `}`, "outcome", false},
		{"completion with a bad event_time", `{` + ok + `,"event_time":"yesterday"}`, "event_time", false},
		{"completion with an unknown field", `{` + ok + `,"colour":"red"}`, "", false},
		{"completion with a wrong type", `{"run":"r","task":"t","attempt":"1","event_id":"e","outcome":"failed"}`, "", false},
		{"completion over a limit", `{` + ok + `,"reason":"` + strings.Repeat("x", protocol.MaxReasonBytes+1) + `"}`, "reason", true},
		{"lease without boot id", `{"kind":"worker_lease","worker":"w","expires_at":"2030-01-02T03:04:05Z"}`, "boot_id", false},
		{"lease without expiry", `{"kind":"worker_lease","worker":"w","boot_id":"b"}`, "expires_at", false},
		{"lease with a bad sent_at", `{"kind":"worker_lease","worker":"w","boot_id":"b","expires_at":"2030-01-02T03:04:05Z","sent_at":"now"}`, "sent_at", false},
		{"timer without run", `{"kind":"timer","task":"t","at":"2030-01-02T03:04:05Z"}`, "run", false},
		{"timer with a bad time", `{"kind":"timer","run":"r","at":"soon"}`, "at", false},
	}
	for _, c := range bad {
		ev, err := protocol.DecodeEvent(c.body)
		var fe *protocol.FieldError
		switch {
		case err == nil:
			t.Errorf("%s: DecodeEvent = %+v, want an error", c.name, ev)
		case c.field == "" && errors.As(err, &fe):
			t.Errorf("%s: %v is a field error, want a decoding error", c.name, err)
		case c.field != "" && !errors.As(err, &fe):
			t.Errorf("%s: %v, want a *FieldError of %s", c.name, err, c.field)
		case c.field != "" && (fe.Field != c.field || fe.TooLarge != c.tooLarge):
			t.Errorf("%s: field %q too large %v, want %q %v (%v)", c.name, fe.Field, fe.TooLarge, c.field, c.tooLarge, err)
		}
	}
}

// The timer message keeps the bytes the scheduler has always queued, and
// reads back as written.
func TestTimerMessage(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	for _, c := range []struct {
		timer protocol.Timer
		want  string
	}{
		{protocol.Timer{Run: "r", Task: "t", At: at}, `{"kind":"timer","run":"r","task":"t","at":"2030-01-02T03:04:05.678Z"}`},
		{protocol.Timer{Run: "r", At: at}, `{"kind":"timer","run":"r","at":"2030-01-02T03:04:05.678Z"}`},
	} {
		b, err := wire.Marshal(c.timer)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", c.timer, b, err, c.want)
			continue
		}
		ev, err := protocol.DecodeEvent(string(b))
		if err != nil || ev.Timer == nil || *ev.Timer != (protocol.Timer{Run: c.timer.Run, Task: c.timer.Task, At: at.Truncate(time.Millisecond)}) {
			t.Errorf("DecodeEvent(%s) = %+v, %v", b, ev.Timer, err)
		}
	}
}
