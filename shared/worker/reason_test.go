package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// A failure's reason is WithReason's, else the error's text; both clipped.
func TestReason(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom <stderr>")
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{boom, "boom <stderr>"},
		{worker.WithCategory(worker.WithReason(boom, "exit status 2: tail"), "exec_failed"), "exit status 2: tail"},
		{worker.WithReason(worker.WithReason(boom, "inner"), "outer"), "outer"},
	} {
		if got := worker.Reason(c.err); got != c.want {
			t.Errorf("Reason(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if got := worker.Reason(errors.New(strings.Repeat("x", 3*worker.MaxReasonBytes))); len(got) != worker.MaxReasonBytes {
		t.Errorf("a long error's reason is %d bytes, want %d", len(got), worker.MaxReasonBytes)
	}
}

// A worker's boot id carries its start by the worker's clock, which is how
// the scheduler tells the newer of two boots of one name.
func TestBootStart(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	w, err := worker.New(worker.Config{APIURL: "http://127.0.0.1:1", EventsQueueURL: "http://q/events", Queue: sqsClient,
		Clock: func() time.Time { return start }}, func(context.Context, worker.Task) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	got, ok := protocol.BootStart(w.BootID())
	if want := start.Truncate(time.Millisecond); !ok || !got.Equal(want) {
		t.Errorf("BootStart(%s) = %s, %v; want %s", w.BootID(), got, ok, want)
	}
	for _, id := range []string{"boot1", "", "01JH2Y0000000000000000BOOT"} {
		if _, ok := protocol.BootStart(id); ok {
			t.Errorf("BootStart(%q) read a start from an id that is not a ULID", id)
		}
	}
}
