package protocol_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
	"github.com/runledger/runledger/statemodel"
)

// The claim and heartbeat bodies are checked in the contract's order, each
// refusal a *FieldError naming its field.
func TestRequestValidate(t *testing.T) {
	t.Parallel()
	claim := protocol.ClaimRequest{Run: "r", Task: "t", Attempt: 1, WorkerID: "w@b", EventID: "c-1"}
	beat := protocol.HeartbeatRequest{Run: "r", Task: "t", Attempt: 1, EventID: "h-1"}
	if err := claim.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := beat.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"claim without run", func() error { c := claim; c.Run = ""; return c.Validate() }(), "run"},
		{"claim without task", func() error { c := claim; c.Task = ""; return c.Validate() }(), "task"},
		{"claim of attempt 0", func() error { c := claim; c.Attempt = 0; return c.Validate() }(), "attempt"},
		{"claim without worker id", func() error { c := claim; c.WorkerID = ""; return c.Validate() }(), "worker_id"},
		{"claim without event id", func() error { c := claim; c.EventID = ""; return c.Validate() }(), "event_id"},
		{"attempt before worker id", func() error { c := claim; c.Attempt, c.WorkerID = -1, ""; return c.Validate() }(), "attempt"},
		{"heartbeat of attempt 0", func() error { h := beat; h.Attempt = 0; return h.Validate() }(), "attempt"},
		{"heartbeat with a colon id", func() error { h := beat; h.EventID = "hb:1"; return h.Validate() }(), "event_id"},
		{"heartbeat with a long id", func() error {
			h := beat
			h.EventID = strings.Repeat("h", protocol.MaxEventIDLen+1)
			return h.Validate()
		}(), "event_id"},
	}
	for _, c := range cases {
		var fe *protocol.FieldError
		if !errors.As(c.err, &fe) || fe.Field != c.field || fe.TooLarge || !strings.HasSuffix(fe.Message, ".") {
			t.Errorf("%s: %v, want a malformed %s *FieldError in one sentence", c.name, c.err, c.field)
		}
	}
}

// The answers of the worker routes are written as the API always wrote
// them, and the SDK reads them back, the claim's envelope included.
func TestAnswers(t *testing.T) {
	t.Parallel()
	lease := time.Date(2030, 1, 2, 3, 4, 5, 678_900_000, time.UTC)
	env := &protocol.Envelope{Job: "j", Run: "r", Task: "t", Attempt: 2, Token: "k", Pool: "p",
		Payload: json.RawMessage(`{"a":"<b>"}`), HeartbeatInterval: 20 * time.Second}
	cases := []struct {
		answer any
		want   string
		into   any
	}{
		{protocol.ClaimAnswer{Claimed: true, LeaseExpiresAt: lease}, `{"claimed":true,"lease_expires_at":"2030-01-02T03:04:05.678Z"}`, &protocol.ClaimAnswer{}},
		{protocol.ClaimAnswer{Claimed: true, LeaseExpiresAt: lease, Envelope: env},
			`{"claimed":true,"lease_expires_at":"2030-01-02T03:04:05.678Z","envelope":{"job":"j","run":"r","task":"t","attempt":2,"token":"k","pool":"p","payload":{"a":"<b>"},"heartbeat_interval":"20s"}}`,
			&protocol.ClaimAnswer{}},
		{protocol.HeartbeatAnswer{CancelRequested: true, LeaseExpiresAt: lease, State: statemodel.StateCancelling},
			`{"cancel_requested":true,"lease_expires_at":"2030-01-02T03:04:05.678Z","state":"CANCELLING"}`, &protocol.HeartbeatAnswer{}},
		{protocol.CompleteAnswer{Result: protocol.ResultDuplicate, State: statemodel.StateSucceeded}, `{"result":"duplicate","state":"SUCCEEDED"}`, &protocol.CompleteAnswer{}},
	}
	for _, c := range cases {
		b, err := wire.Marshal(c.answer)
		if err != nil || string(b) != c.want {
			t.Errorf("Marshal(%+v) = %s, %v;\nwant %s", c.answer, b, err, c.want)
			continue
		}
		if err := json.Unmarshal(b, c.into); err != nil {
			t.Errorf("read back %s: %v", b, err)
			continue
		}
		again, _ := wire.Marshal(c.into)
		if string(again) != c.want {
			t.Errorf("read back and written again: %s, want %s", again, c.want)
		}
	}
}
