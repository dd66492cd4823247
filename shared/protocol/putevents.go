package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// PutEvents is the body of POST /v1/events/put: EventBridge PutEvents'
// request, 1 to MaxPutEventsEntries entries.
type PutEvents struct {
	Entries []PutEventsEntry `json:"Entries"`
}

// PutEventsEntry is one event to deliver. Detail is JSON text of an
// object; Time is RFC 3339 ("" or absent: now).
type PutEventsEntry struct {
	Source     string   `json:"Source"`
	DetailType string   `json:"DetailType"`
	Detail     string   `json:"Detail"`
	Resources  []string `json:"Resources,omitempty"`
	Time       string   `json:"Time,omitempty"`
}

// PutEventsAnswer is the answer of POST /v1/events/put.
type PutEventsAnswer struct {
	FailedEntryCount int                    `json:"FailedEntryCount"`
	Entries          []PutEventsEntryAnswer `json:"Entries"`
}

// PutEventsEntryAnswer names the id given to one entry's event.
type PutEventsEntryAnswer struct {
	EventID string `json:"EventId"`
}

// Limits of a PutEvents body.
const (
	MaxPutEventsEntries = 10
	MaxEventTextBytes   = 256
	MaxEventDetailBytes = 64 * 1024
	MaxEventResources   = 20
)

// Check validates a PutEvents body; a refusal is a *FieldError naming the
// entry's field ("Entries[2].Detail").
func (p PutEvents) Check() error {
	if len(p.Entries) == 0 || len(p.Entries) > MaxPutEventsEntries {
		return &FieldError{Field: "Entries", Message: fmt.Sprintf("Entries must hold 1 to %d events, not %d.", MaxPutEventsEntries, len(p.Entries))}
	}
	for i, e := range p.Entries {
		if err := e.check(fmt.Sprintf("Entries[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func (e PutEventsEntry) check(at string) error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: at + "." + field, Message: at + "." + field + " " + fmt.Sprintf(format, args...) + "."}
	}
	for _, f := range []struct{ name, value string }{{"Source", e.Source}, {"DetailType", e.DetailType}} {
		if f.value == "" || len(f.value) > MaxEventTextBytes {
			return bad(f.name, "must be 1 to %d bytes", MaxEventTextBytes)
		}
	}
	if len(e.Detail) > MaxEventDetailBytes {
		return &FieldError{Field: at + ".Detail", TooLarge: true, Message: fmt.Sprintf("%s.Detail is %d bytes, over the limit of %d (64 KiB).", at, len(e.Detail), MaxEventDetailBytes)}
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(e.Detail), &obj) != nil || obj == nil {
		return bad("Detail", "must be the JSON text of an object")
	}
	if len(e.Resources) > MaxEventResources {
		return bad("Resources", "holds %d values, more than %d", len(e.Resources), MaxEventResources)
	}
	for _, r := range e.Resources {
		if r == "" || len(r) > 2048 {
			return bad("Resources", "values must be 1 to 2048 bytes")
		}
	}
	if e.Time != "" {
		t, err := time.Parse(time.RFC3339, e.Time)
		if err != nil {
			return bad("Time", "must be an RFC 3339 time")
		}
		if !statemodel.LogicalTimeInRange(t.UTC()) {
			// The event's time becomes its runs' logical time.
			return bad("Time", "must be in %s, not %s", statemodel.LogicalTimeRange, FormatTime(t))
		}
	}
	return nil
}

// CompactDetail is Detail as compact JSON (Check passed).
func (e PutEventsEntry) CompactDetail() json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, []byte(e.Detail)) != nil {
		return json.RawMessage("{}")
	}
	return b.Bytes()
}
