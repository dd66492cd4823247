package protocol_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// A client reads the server's answer into the same types the server wrote
// it from, and writing them again gives the answer back byte for byte:
// nulls, left-out fields, times, key order and HTML characters alike. The
// fixtures are answers the API wrote before the views moved here.
func TestViewsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		file string
		into any
	}{
		{"run_detail.json", &protocol.RunDetail{}},
		{"history_page.json", &protocol.HistoryPage{}},
	} {
		raw := strings.TrimSuffix(mustRead(t, c.file), "\n")
		if err := json.Unmarshal([]byte(raw), c.into); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		got, err := wire.Marshal(c.into)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != raw {
			t.Errorf("%s written again:\n got %s\nwant %s", c.file, got, raw)
		}
	}
	var d protocol.RunDetail
	if err := json.Unmarshal([]byte(mustRead(t, "run_detail.json")), &d); err != nil {
		t.Fatal(err)
	}
	a := d.Tasks[0].Attempts[1]
	if !d.Run.EndedAt.IsZero() || d.Run.Ended() || a.ErrorCategory != "" || a.ExitCode != nil || !a.LastHeartbeatAt.IsZero() ||
		d.Run.WaitingFor[0].Run != "" || d.Run.WaitingFor[1].Run != "run0" || d.Tasks[0].Attempts[0].LateEventsDropped != 2 {
		t.Errorf("nulls were not read as zero values: run %+v, attempt %+v", d.Run, a)
	}
}

// What the server leaves unset is written as the contract says: null for
// times, ids and categories, left out where the field is optional.
func TestViewNulls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		view any
		want string
	}{
		{protocol.Attempt{N: 1, State: "QUEUED", Executor: "queue", LateEvents: []protocol.LateEvent{}},
			`{"n":1,"state":"QUEUED","worker_id":null,"executor":"queue","executor_id":null,"queued_at":null,"started_at":null,"ended_at":null,` +
				`"last_heartbeat_at":null,"exit_code":null,"error_category":null,"spends_budget":false,"late_events":[],` +
				`"late_events_dropped":0,"metrics":{"queue_wait_ms":null,"run_ms":null}}`},
		{protocol.LateEvent{EventID: "e", Event: "attempt.succeeded", Actor: "worker", ObservedAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("", 3600))},
			`{"event_id":"e","event":"attempt.succeeded","actor":"worker","event_time":null,"observed_at":"2030-01-02T02:04:05.000Z"}`},
		{protocol.RunPage{}, `{"next_token":null,"runs":null}`},
		{protocol.HistoryPage{NextToken: "t", Transitions: []protocol.Transition{}}, `{"next_token":"t","transitions":[]}`},
		{protocol.WaitingFor{Job: "up", Require: "published", Run: "r&1"}, `{"job":"up","logical_time":null,"require":"published","run":"r&1"}`},
	} {
		got, err := wire.Marshal(c.view)
		if err != nil || string(got) != c.want {
			t.Errorf("Marshal(%+v) =\n %s, %v\nwant %s", c.view, got, err, c.want)
		}
	}
}
