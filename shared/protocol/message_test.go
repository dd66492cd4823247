package protocol_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runledger/runledger/shared/protocol"
)

// roundTrip decodes a fixture into v, encodes v again, and checks that the
// JSON is the fixture's (as values: key order and spacing aside).
func roundTrip(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decode %s: %v", file, err)
	}
	again, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%s round trip:\n got %s\nwant %s", file, again, bytes.Join(bytes.Fields(raw), []byte(" ")))
	}
}

func TestEnvelopeFixture(t *testing.T) {
	t.Parallel()
	var env protocol.Envelope
	roundTrip(t, "envelope.json", &env)
	want := protocol.Envelope{
		Job: "nightly-report", Run: "01JH2Z3ZKX8Q6S1M4T7V9W0ABC", Task: "extract", Attempt: 2, Token: "tk_3f9a0c1e", Pool: "default",
		LogicalTime:       time.Date(2026, 1, 2, 2, 0, 0, 0, time.UTC),
		HeartbeatInterval: 20 * time.Second, RunTimeout: time.Hour,
		ClaimBy: time.Date(2026, 1, 2, 3, 14, 5, 123_000_000, time.UTC),
	}
	if env.Job != want.Job || !env.LogicalTime.Equal(want.LogicalTime) || env.Run != want.Run || env.Task != want.Task || env.Attempt != want.Attempt || env.Token != want.Token || env.Pool != want.Pool ||
		env.HeartbeatInterval != want.HeartbeatInterval || env.RunTimeout != want.RunTimeout || !env.ClaimBy.Equal(want.ClaimBy) {
		t.Errorf("envelope = %+v, want %+v", env, want)
	}
	if string(env.Params) != `{"day": "2026-01-02"}` {
		t.Errorf("params = %s", env.Params)
	}
}

func TestCompletionFixture(t *testing.T) {
	t.Parallel()
	var c protocol.Completion
	roundTrip(t, "completion.json", &c)
	if c.Outcome != protocol.OutcomeFailed || c.ExitCode == nil || *c.ExitCode != 3 || c.IsRetryable() || c.ErrorCategory != "quota_exceeded" ||
		!c.EventTime.Equal(time.Date(2026, 1, 2, 3, 20, 0, 500_000_000, time.UTC)) || c.Token != "tk_3f9a0c1e" ||
		c.Reason != "quota <exceeded> & retried" {
		t.Errorf("completion = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	if ev, err := protocol.DecodeEvent(mustRead(t, "completion.json")); err != nil || ev.Completion == nil || ev.Lease != nil || ev.Timer != nil ||
		ev.Completion.Reason != c.Reason {
		t.Errorf("DecodeEvent(completion) = %+v, %v", ev, err)
	}
	var l protocol.Lease
	if err := json.Unmarshal([]byte(mustRead(t, "completion.json")), &l); err == nil {
		t.Error("a completion decoded as a lease")
	}
}

func TestLeaseFixture(t *testing.T) {
	t.Parallel()
	var l protocol.Lease
	roundTrip(t, "lease.json", &l)
	if l.Worker != "host-a" || l.BootID != "01JH2Y0000000000000000BOOT" || l.Seq != 7 || len(l.Running) != 1 ||
		l.Running[0].AttemptRef != (protocol.AttemptRef{Run: "01JH2Z3ZKX8Q6S1M4T7V9W0ABC", Task: "extract", Attempt: 2}) ||
		!l.ExpiresAt.Equal(time.Date(2026, 1, 2, 3, 20, 30, 0, time.UTC)) {
		t.Errorf("lease = %+v", l)
	}
	if l.WorkerID() != "host-a@01JH2Y0000000000000000BOOT" {
		t.Errorf("worker id = %q", l.WorkerID())
	}
	if ev, err := protocol.DecodeEvent(mustRead(t, "lease.json")); err != nil || ev.Lease == nil || ev.Completion != nil ||
		ev.Lease.WorkerID() != l.WorkerID() || !ev.Lease.SentAt.Equal(l.SentAt) {
		t.Errorf("DecodeEvent(lease) = %+v, %v", ev, err)
	}
	var c protocol.Completion
	if err := json.Unmarshal([]byte(mustRead(t, "lease.json")), &c); err == nil {
		t.Error("a lease decoded as a completion")
	}
	// An idle process lists nothing, as an empty array.
	b, err := json.Marshal(protocol.Lease{Worker: "w", BootID: "b", ExpiresAt: time.Unix(0, 0)})
	if err != nil || !strings.Contains(string(b), `"running":[]`) {
		t.Errorf("idle lease = %s, %v", b, err)
	}
}

func TestParseEnvelopeRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"not json":           `nope`,
		"no run":             `{"task":"t","attempt":1,"token":"k"}`,
		"no task":            `{"run":"r","attempt":1,"token":"k"}`,
		"attempt 0":          `{"run":"r","task":"t","attempt":0,"token":"k"}`,
		"no token":           `{"run":"r","task":"t","attempt":1}`,
		"bad duration":       `{"run":"r","task":"t","attempt":1,"token":"k","heartbeat_interval":"20"}`,
		"negative timeout":   `{"run":"r","task":"t","attempt":1,"token":"k","run_timeout":"-1s"}`,
		"bad claim_by":       `{"run":"r","task":"t","attempt":1,"token":"k","claim_by":"tomorrow"}`,
		"attempt not number": `{"run":"r","task":"t","attempt":"1","token":"k"}`,
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if env, err := protocol.ParseEnvelope(body); err == nil {
				t.Errorf("ParseEnvelope(%s) = %+v, want an error", body, env)
			}
		})
	}
	env, err := protocol.ParseEnvelope(`{"run":"r","task":"t","attempt":1,"token":"k","payload":null,"run_timeout":"0s"}`)
	if err != nil || env.Payload != nil || env.RunTimeout != 0 || env.HeartbeatInterval != 0 {
		t.Errorf("minimal envelope = %+v, %v", env, err)
	}
}

func TestCompletionValidate(t *testing.T) {
	t.Parallel()
	ok := protocol.Completion{Run: "r", Task: "t", Attempt: 1, EventID: "e", Outcome: protocol.OutcomeSucceeded}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*protocol.Completion){
		"no event id":  func(c *protocol.Completion) { c.EventID = "" },
		"scheduler id": func(c *protocol.Completion) { c.EventID = "dispatch:2" },
		"bad outcome":  func(c *protocol.Completion) { c.Outcome = "done" },
		"attempt 0":    func(c *protocol.Completion) { c.Attempt = 0 },
		"bad category": func(c *protocol.Completion) { c.ErrorCategory = "Bad-Category" },
		"trailing _":   func(c *protocol.Completion) { c.ErrorCategory = "bad_" },
		"no run":       func(c *protocol.Completion) { c.Run = "" },
		"big ref":      func(c *protocol.Completion) { c.OutputRef = strings.Repeat("r", protocol.MaxOutputRefBytes+1) },
		"long category": func(c *protocol.Completion) {
			c.ErrorCategory = strings.Repeat("a", protocol.MaxErrorCategoryLen+1)
		},
		"big reason": func(c *protocol.Completion) { c.Reason = strings.Repeat("x", protocol.MaxReasonBytes+1) },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate(%+v) = nil", name, c)
		}
	}
}

// Client event ids (docs/api.md, "Workers"): 1 to 128 characters of
// [A-Za-z0-9._-]; ids with a colon and the bare word "deps" are the
// scheduler's.
func TestCheckEventID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "01JD7Z3K4Q8V6W2X9Y0ZABCDEF", "claim-1.retry_2", strings.Repeat("x", protocol.MaxEventIDLen), "deps2", "Deps"} {
		if err := protocol.CheckEventID(id); err != nil {
			t.Errorf("CheckEventID(%q) = %v, want nil", id, err)
		}
	}
	for _, id := range []string{"", "dispatch:2", "claim:w1", "deps", strings.Repeat("x", protocol.MaxEventIDLen+1),
		"with space", "slash/id", "é", "tab\t", "a:b"} {
		var fe *protocol.FieldError
		if err := protocol.CheckEventID(id); !errors.As(err, &fe) || fe.Field != "event_id" || fe.TooLarge {
			t.Errorf("CheckEventID(%q) = %v, want a malformed event_id *FieldError (422)", id, err)
		}
	}
}

// The limits of the worker routes (docs/api.md, "Workers"), each at its edge: the limit passes,
// one more is too large (413), a malformed value is refused (422).
func TestCheckReportFields(t *testing.T) {
	t.Parallel()
	rep := strings.Repeat
	cases := []struct {
		name               string
		ref, category, why string
		field              string // "" accepts
		tooLarge           bool
	}{
		{"all empty", "", "", "", "", false},
		{"at the limits", rep("r", 2048), rep("a", 64), rep("é", 2048), "", false},
		{"html and newlines pass", "s3://b/<k>&v", "quota_exceeded", "line 1\nline <2>", "", false},
		{"output_ref over 2 KiB", rep("r", 2049), "", "", "output_ref", true},
		{"output_ref with a control character", "s3://b/\x01", "", "", "output_ref", false},
		{"output_ref not UTF-8", "s3://b/\xff", "", "", "output_ref", false},
		{"error_category over 64", "", rep("a", 65), "", "error_category", true},
		{"error_category not snake_case", "", "Quota-Exceeded", "", "error_category", false},
		{"reason over 4 KiB", "", "", rep("x", 4097), "reason", true},
		{"reason not UTF-8", "", "", "tail \xff", "reason", false},
	}
	for _, c := range cases {
		err := protocol.CheckReportFields(c.ref, c.category, c.why)
		var fe *protocol.FieldError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.field != "" && !errors.As(err, &fe):
			t.Errorf("%s: %v, want a *FieldError", c.name, err)
		case c.field != "" && (fe.Field != c.field || fe.TooLarge != c.tooLarge):
			t.Errorf("%s: field %q too large %v, want %q %v (%s)", c.name, fe.Field, fe.TooLarge, c.field, c.tooLarge, fe.Message)
		case c.field != "" && (!strings.HasPrefix(fe.Message, c.field) || !strings.HasSuffix(fe.Message, ".")):
			t.Errorf("%s: message %q is not one sentence naming the field", c.name, fe.Message)
		}
	}
}

// ClipReason keeps the tail, whole characters only.
func TestClipReason(t *testing.T) {
	t.Parallel()
	short := "short"
	if got := protocol.ClipReason(short); got != short {
		t.Errorf("ClipReason(%q) = %q", short, got)
	}
	long := "head" + strings.Repeat("é", protocol.MaxReasonBytes) + "TAIL"
	got := protocol.ClipReason(long)
	if len(got) > protocol.MaxReasonBytes || !strings.HasSuffix(got, "TAIL") || !utf8.ValidString(got) {
		t.Errorf("ClipReason: %d bytes, suffix %q, valid %v", len(got), got[max(0, len(got)-4):], utf8.ValidString(got))
	}
	if err := protocol.CheckReportFields("", "", got); err != nil {
		t.Error(err)
	}
}

func mustRead(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A lease's proof of an attempt checks against the attempt's token hash
// only, for that attempt in that lease: the fixture's proof is made with
// the token 0123456789abcdef0123456789abcdef.
func TestLeaseProof(t *testing.T) {
	t.Parallel()
	var l protocol.Lease
	if err := json.Unmarshal([]byte(mustRead(t, "lease.json")), &l); err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	hash, a, proof := protocol.HashToken(token), l.Running[0].AttemptRef, l.Running[0].Proof
	if !protocol.CheckLeaseProof(hash, l, a, proof) {
		t.Fatalf("the fixture's proof does not check against its token's hash")
	}
	other := a
	other.Attempt++
	later := l
	later.Seq++
	renamed := l
	renamed.BootID = "01JH2Y0000000000000000B00T"
	for name, ok := range map[string]bool{
		"another token":   protocol.CheckLeaseProof(protocol.HashToken("f"+token[1:]), l, a, proof),
		"another attempt": protocol.CheckLeaseProof(hash, l, other, proof),
		"another seq":     protocol.CheckLeaseProof(hash, later, a, proof),
		"another boot":    protocol.CheckLeaseProof(hash, renamed, a, proof),
		"no proof":        protocol.CheckLeaseProof(hash, l, a, ""),
		"no hash":         protocol.CheckLeaseProof("", l, a, proof),
	} {
		if ok {
			t.Errorf("%s: the proof checks", name)
		}
	}
	proved := l
	proved.Running = []protocol.LeasedAttempt{{AttemptRef: a}}
	proved.Prove([]string{token})
	if proved.Running[0].Proof != proof {
		t.Errorf("Prove made %q, want the fixture's %q", proved.Running[0].Proof, proof)
	}
}

// The claim nonce an executor's Start gets travels in no message: an
// envelope with one encodes as one without, and a claim answer too.
func TestEnvelopeNeverCarriesTheClaimNonce(t *testing.T) {
	env := protocol.Envelope{Run: "r", Task: "t", Attempt: 1, Token: "tok", Pool: "p", ClaimNonce: "the-nonce"}
	for _, v := range []any{env, protocol.ClaimAnswer{Claimed: true, Envelope: &env}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "the-nonce") || !strings.Contains(string(b), `"token":"tok"`) {
			t.Fatalf("%T encodes as %s: want the token and no nonce", v, b)
		}
	}
}
