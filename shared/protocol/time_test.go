package protocol_test

import (
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

// The one time format: UTC, milliseconds, read back unchanged; any RFC
// 3339 offset and fraction is read, truncated to the millisecond.
func TestFormatTime(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	in := time.Date(2026, 3, 1, 12, 0, 0, 123987654, shanghai)
	if got := protocol.FormatTime(in); got != "2026-03-01T04:00:00.123Z" {
		t.Errorf("FormatTime = %s", got)
	}
	if got := protocol.FormatTime(time.Date(2026, 3, 1, 4, 0, 0, 0, time.UTC)); got != "2026-03-01T04:00:00.000Z" {
		t.Errorf("FormatTime of a whole second = %s", got)
	}
	if protocol.NullTime(time.Time{}) != nil {
		t.Error("NullTime of the zero time is not nil")
	}
	if p := protocol.NullTime(in); p == nil || *p != "2026-03-01T04:00:00.123Z" {
		t.Errorf("NullTime = %v", p)
	}

	for text, want := range map[string]time.Time{
		"2026-03-01T04:00:00Z":             time.Date(2026, 3, 1, 4, 0, 0, 0, time.UTC),
		"2026-03-01T12:00:00.123987+08:00": time.Date(2026, 3, 1, 4, 0, 0, 123000000, time.UTC),
	} {
		got, err := protocol.ParseTime(text)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%s) = %v, %v; want %v", text, got, err, want)
		}
		if again, _ := protocol.ParseTime(protocol.FormatTime(got)); !again.Equal(got) {
			t.Errorf("%s does not survive format and parse", text)
		}
	}
	for _, bad := range []string{"", "2026-03-01", "2026-03-01T04:00:00", "yesterday"} {
		if _, err := protocol.ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) succeeded", bad)
		}
	}
}
