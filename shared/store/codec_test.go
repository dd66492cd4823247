package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// These tests are pure: no endpoint, only the encodings.

var epoch0 = time.Date(2031, 3, 14, 9, 26, 53, 589793238, time.UTC)

// lifecycle drives one instance through retry, cancel and override with
// statemodel and returns the snapshot and its history: every field the
// codec must carry gets a value somewhere.
func lifecycle(t *testing.T) (statemodel.Snapshot, []statemodel.Transition) {
	t.Helper()
	p := statemodel.DefaultPolicy()
	p.Retry.Jitter = statemodel.JitterNone
	var s statemodel.Snapshot
	var hist []statemodel.Transition
	now := epoch0
	n := 0
	apply := func(typ statemodel.EventType, attempt int, mut func(*statemodel.Event)) {
		t.Helper()
		n++
		actor, _ := statemodel.ActorOf(typ)
		e := statemodel.Event{ID: "e" + strings.Repeat("x", n), Type: typ, Actor: actor, Attempt: attempt}
		if mut != nil {
			mut(&e)
		}
		d := statemodel.Apply(s, e, now, p)
		if d.Outcome != statemodel.Applied {
			t.Fatalf("%s: %s %v", e, d.Outcome, d.Err)
		}
		s = d.Snapshot
		hist = append(hist, *d.Transition)
		now = now.Add(90 * time.Second)
	}
	exit := 3
	apply(statemodel.EvCreated, 0, nil)
	apply(statemodel.EvDepsMet, 0, nil)
	apply(statemodel.EvDispatched, 1, func(e *statemodel.Event) { e.TokenHash, e.ExecutorID = "th", "msg" })
	apply(statemodel.EvStarted, 1, func(e *statemodel.Event) { e.WorkerID = "w1" })
	apply(statemodel.EvFailed, 1, func(e *statemodel.Event) {
		e.ExitCode, e.ErrorCategory, e.OutputRef = &exit, "oom", "s3://out"
		e.Evidence = map[string]string{"host": "h1", "pid": "42"}
	})
	now = now.Add(time.Hour)
	apply(statemodel.EvRetryDue, 0, nil)
	apply(statemodel.EvDispatched, 2, nil)
	apply(statemodel.EvStarted, 2, func(e *statemodel.Event) { e.WorkerID = "w2" })
	apply(statemodel.EvCancelRequested, 0, func(e *statemodel.Event) { e.Operator, e.Reason = "ops", "stop it" })
	return s, hist
}

func TestSnapshotRoundTrip(t *testing.T) {
	s, hist := lifecycle(t)
	inst := ledger.Instance{
		Key: ledger.InstanceKey{Run: "r1", Task: "t1"}, Job: "j", Pool: "default", Payload: []byte(`{"a":1}`),
		Policy: statemodel.DefaultPolicy(), DependsOn: []string{"up"}, TriggerRule: statemodel.TriggerRule("all_done"),
		Publish: true, Snapshot: s,
	}
	inst.Policy.Random = nil
	// The timer as indexed by a write an hour before it.
	at, kind := s.Timer()
	inst.TimerAt, inst.TimerKind = ledger.IndexedTimer(inst.Key, s, at.Add(-time.Hour), ledger.TimerHorizon)
	got, err := decodeInstance(instanceItem(runPK(inst.Key.Run), inst).present())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Snapshot.EqualState(s) || got.Snapshot.Lease != s.Lease {
		t.Fatalf("snapshot round trip:\n got %+v\nwant %+v", got.Snapshot, s)
	}
	if !got.TimerAt.Equal(at) || got.TimerKind != kind || kind != statemodel.TimerCancel {
		t.Fatalf("timer %s %s, want %s %s", got.TimerAt, got.TimerKind, at, kind)
	}
	if !got.Policy.Retry.Equal(inst.Policy.Retry) || got.Policy.Timeouts != inst.Policy.Timeouts ||
		got.Policy.EvidenceWindow != inst.Policy.EvidenceWindow || got.Policy.MaxResubmits != inst.Policy.MaxResubmits ||
		got.Policy.DepsRecheck != inst.Policy.DepsRecheck {
		t.Fatalf("policy round trip: %+v", got.Policy)
	}
	if got.Job != "j" || got.Pool != "default" || string(got.Payload) != `{"a":1}` || got.DependsOn[0] != "up" ||
		got.TriggerRule != "all_done" || !got.Publish || got.Key != inst.Key {
		t.Fatalf("static fields: %+v", got)
	}
	for i, tr := range hist {
		r := &reader{it: transitionFields(tr).present()}
		back := readTransition(r)
		if r.err != nil {
			t.Fatal(r.err)
		}
		// Replaying decoded records must give the same snapshot: compare
		// by folding rather than field by field.
		hist[i] = back
	}
	replayed, err := statemodel.Replay(hist)
	if err != nil || !replayed.EqualState(s) {
		t.Fatalf("replay of decoded records: %v\n got %+v\nwant %+v", err, replayed, s)
	}
	if hist[4].Evidence["pid"] != "42" || *hist[4].AttemptRecord.ExitCode != 3 || hist[8].Operator != "ops" {
		t.Fatalf("record fields lost: %+v", hist[4])
	}
}

func TestTerminalInstanceHasNoTimerAttributes(t *testing.T) {
	s := statemodel.Snapshot{State: statemodel.StateSucceeded, Version: 3, Deadline: epoch0}
	it := instanceItem(runPK("r"), ledger.Instance{Key: ledger.InstanceKey{Run: "r", Task: "t"}, Snapshot: s})
	for _, a := range []string{"timer_shard", "timer_at", "timer_kind"} {
		if v, ok := it[a]; !ok || v != nil {
			t.Fatalf("%s is %v; want present as nil so updates REMOVE it", a, v)
		}
	}
	if _, ok := it.present()["timer_at"]; ok {
		t.Fatal("a put would write timer_at")
	}
}

func TestTimeLayoutSortsAsText(t *testing.T) {
	times := []time.Time{
		epoch0, epoch0.Add(time.Nanosecond), epoch0.Add(time.Second), epoch0.Add(-time.Hour),
		time.Date(2031, 3, 14, 9, 26, 53, 0, time.FixedZone("X", 3600)),
	}
	for _, a := range times {
		for _, b := range times {
			if (ledger.FormatTime(a) < ledger.FormatTime(b)) != a.Before(b) {
				t.Fatalf("%s vs %s: text order disagrees", ledger.FormatTime(a), ledger.FormatTime(b))
			}
		}
		back, err := parseTime(ledger.FormatTime(a))
		if err != nil || !back.Equal(a) {
			t.Fatalf("round trip of %s: %s %v", a, back, err)
		}
	}
	if n := len(ledger.FormatTime(epoch0)); n != len(ledger.FormatTime(epoch0.Truncate(time.Second))) {
		t.Fatalf("width varies: %d", n)
	}
}

func TestItemSizeRules(t *testing.T) {
	cases := []struct {
		name string
		it   map[string]types.AttributeValue
		want int
	}{
		{"string", map[string]types.AttributeValue{"ab": str("héllo")}, 2 + 6},
		{"number", map[string]types.AttributeValue{"n": num(12345)}, 1 + 3 + 1},
		{"negative number", map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "-0.001200"}}, 1 + 1 + 1 + 1},
		{"binary", map[string]types.AttributeValue{"b": &types.AttributeValueMemberB{Value: []byte{1, 2, 3}}}, 1 + 3},
		{"bool", map[string]types.AttributeValue{"ok": boolean(true)}, 2 + 1},
		{"empty list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{}}, 1 + 3},
		{"list", map[string]types.AttributeValue{"l": &types.AttributeValueMemberL{Value: []types.AttributeValue{str("ab"), boolean(false)}}}, 1 + 3 + (1 + 2) + (1 + 1)},
		{"map", map[string]types.AttributeValue{"m": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"k": str("v")}}}, 1 + 3 + (1 + 1 + 1)},
		{"string set", map[string]types.AttributeValue{"ss": &types.AttributeValueMemberSS{Value: []string{"a", "bc"}}}, 2 + 3},
		{"absent", map[string]types.AttributeValue{"x": nil}, 0},
	}
	for _, c := range cases {
		if got := itemSize(c.it); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	numbers := map[string]int{
		"0": 1, "1": 2, "-1": 3, "11": 2, "1.1": 3, "-1.1": 4, "0.5": 2, "0.05": 2, "101": 3, "10.1": 3,
		"1234": 3, "-1234": 4, "12345": 4, "-0.001234": 4, "1E+10": 2, "1e11": 2, "10000": 2, "1.5E-20": 3,
		"99999999999999999999999999999999999999": 20, "-99999999999999999999999999999999999999": 21,
		"123456789.123456789": 11,
	}
	// Measured against DynamoDB Local 1.25.1 (largest item it accepts).
	for n, want := range numbers {
		if got := numberSize(n); got != want {
			t.Errorf("number %s: %d bytes, want %d", n, got, want)
		}
	}
	if got := writeUnits([]int{1, 1024, 1025, 0}, true); got != 2*(1+1+2+1) {
		t.Errorf("transactional write units %v", got)
	}
}

func TestKeyChecks(t *testing.T) {
	ok := []string{"a", "nightly-report", "t_1", strings.Repeat("j", ledger.MaxJobNameBytes)}
	for _, v := range ok {
		if err := ledger.CheckJobName(v); err != nil {
			t.Errorf("job %q: %v", v, err)
		}
	}
	bad := []string{"", "a#b", strings.Repeat("j", ledger.MaxJobNameBytes+1), "\xff"}
	for _, v := range bad {
		var ike *ledger.InvalidKeyError
		if err := ledger.CheckJobName(v); !errors.As(err, &ike) || !errors.Is(err, ledger.ErrInvalidKey) {
			t.Errorf("job %q: %v, want an InvalidKeyError", v, err)
		}
	}
	k := ledger.InstanceKey{Run: "r", Task: strings.Repeat("t", ledger.MaxTaskIDBytes)}
	if err := ledger.CheckInstanceKey(k); err != nil {
		t.Fatal(err)
	}
	if n := len(transitionSK(k.Task, 1)); n > ledger.MaxSortKeyBytes {
		t.Fatalf("the longest task id makes a %d-byte transition key", n)
	}
	if n := len(attemptSK(k.Task, 999)); n > ledger.MaxSortKeyBytes {
		t.Fatalf("the longest task id makes a %d-byte attempt key", n)
	}
	if err := ledger.CheckEventID(k, strings.Repeat("e", ledger.MaxEventIDBytes)); err != nil {
		t.Fatalf("a %d-byte event id with the longest task: %v", ledger.MaxEventIDBytes, err)
	}
	if err := ledger.CheckEventID(k, strings.Repeat("e", ledger.MaxEventIDBytes+1)); !errors.Is(err, ledger.ErrInvalidKey) {
		t.Fatalf("an event id past its limit: %v", err)
	}
}

func TestTokens(t *testing.T) {
	lek := map[string]types.AttributeValue{"pk": str("JOB#a"), "sk": str("RUN#1")}
	tok := encodeToken(lek)
	got, err := decodeToken(tok, map[string]string{"pk": "JOB#a", "sk": ""})
	if err != nil || len(got) != 2 {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, c := range []struct {
		tok  string
		want map[string]string
	}{
		{tok, map[string]string{"pk": "JOB#b", "sk": ""}},                  // another listing's token
		{tok, map[string]string{"pk": "", "sk": "", "list_pk": ""}},        // another shape
		{"%%%", map[string]string{"pk": ""}},                               // not base64
		{encodeToken(map[string]types.AttributeValue{"pk": str("")}), nil}, // empty
	} {
		if _, err := decodeToken(c.tok, c.want); !errors.Is(err, ledger.ErrInvalidPageToken) {
			t.Errorf("token %q for %v: %v, want invalid", c.tok, c.want, err)
		}
	}
	if encodeToken(nil) != "" {
		t.Fatal("the end of a listing must be the empty token")
	}
}

func TestTimerShardIsStableAndSpread(t *testing.T) {
	seen := map[string]bool{}
	for i := range 4000 {
		pk, sk := runPK("r"+strings.Repeat("x", i)), instanceSK("t")
		a, b := timerShard(pk, sk), timerShard(pk, sk)
		if a != b {
			t.Fatal("shard is not stable")
		}
		seen[a] = true
	}
	if len(seen) != tableschema.TimerShards {
		t.Fatalf("4000 keys fell in %d of %d shards", len(seen), tableschema.TimerShards)
	}
}
