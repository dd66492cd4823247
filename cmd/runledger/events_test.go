package main

import (
	"testing"
	"time"
)

func TestSinceFlag(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"10m":                  now.Add(-10 * time.Minute),
		"2026-12-01T09:00:00Z": now.Add(-time.Hour),
	} {
		got, err := sinceFlag(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("--since %q: %s %v, want %s", in, got, err, want)
		}
	}
	if _, err := sinceFlag("yesterday", now); err == nil {
		t.Error("--since yesterday was accepted")
	}
}
