package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/worker"
)

// wireFence is a fence as a claim answer carries it.
const wireFence = `{"table": "ledger", "key": {"pk": "RUN#r1", "sk": "TASK#main"},
	"condition": "#a = :a AND #s IN (:s0, :s1)", "names": {"#a": "attempt", "#s": "state"},
	"values": {":a": 2, ":s0": "RUNNING", ":s1": "CANCELLING"}}`

// A fence decoded from the wire becomes the ConditionCheck as DynamoDB
// wants it: key and string values S, the attempt number N (JSON decodes it
// as a float; it must read "2", not "2.0" or "2e+00").
func TestConditionCheckFromTheWire(t *testing.T) {
	t.Parallel()
	var f worker.Fence
	if err := json.Unmarshal([]byte(wireFence), &f); err != nil {
		t.Fatal(err)
	}
	item, err := worker.ConditionCheck(f)
	if err != nil {
		t.Fatal(err)
	}
	c := item.ConditionCheck
	if c == nil || item.Put != nil || item.Update != nil || item.Delete != nil {
		t.Fatalf("item %+v, want a ConditionCheck only", item)
	}
	if aws.ToString(c.TableName) != "ledger" || aws.ToString(c.ConditionExpression) != f.Condition {
		t.Fatalf("check on %q with %q", aws.ToString(c.TableName), aws.ToString(c.ConditionExpression))
	}
	if s(t, c.Key["pk"]) != "RUN#r1" || s(t, c.Key["sk"]) != "TASK#main" || len(c.Key) != 2 {
		t.Fatalf("key %+v", c.Key)
	}
	if n, ok := c.ExpressionAttributeValues[":a"].(*types.AttributeValueMemberN); !ok || n.Value != "2" {
		t.Fatalf(":a is %#v, want the number 2", c.ExpressionAttributeValues[":a"])
	}
	if s(t, c.ExpressionAttributeValues[":s1"]) != "CANCELLING" || c.ExpressionAttributeNames["#s"] != "state" {
		t.Fatalf("values %+v names %+v", c.ExpressionAttributeValues, c.ExpressionAttributeNames)
	}
	// The answer is the caller's: changing it leaves the fence as it was.
	c.ExpressionAttributeNames["#a"] = "changed"
	if f.Names["#a"] != "attempt" {
		t.Fatal("the ConditionCheck shares its names with the fence")
	}
}

func s(t *testing.T, v types.AttributeValue) string {
	t.Helper()
	sv, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		t.Fatalf("%#v is not a string", v)
	}
	return sv.Value
}

// A fence that lacks a part, or holds a value that is neither a string
// nor a number, is refused rather than turned into a check that proves
// nothing.
func TestConditionCheckRefusesAnIncompleteFence(t *testing.T) {
	t.Parallel()
	good := func() worker.Fence {
		var f worker.Fence
		if err := json.Unmarshal([]byte(wireFence), &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	cases := map[string]func(*worker.Fence){
		"no table":     func(f *worker.Fence) { f.Table = "" },
		"no key":       func(f *worker.Fence) { f.Key = nil },
		"no condition": func(f *worker.Fence) { f.Condition = "" },
		"a bool value": func(f *worker.Fence) { f.Values[":a"] = true },
		"a map value":  func(f *worker.Fence) { f.Values[":a"] = map[string]any{"N": "2"} },
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := good()
			spoil(&f)
			if item, err := worker.ConditionCheck(f); err == nil {
				t.Fatalf("accepted: %+v", item.ConditionCheck)
			}
		})
	}
}

// The handler gets the fence the claim answer carried; without one (the
// in-memory ledger) Fence answers ErrNoFence, and so does a Task built by
// hand.
func TestTaskFenceComesFromTheClaimAnswer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		fence json.RawMessage
	}{
		{"with a fence", json.RawMessage(wireFence)},
		{"without", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, cfg := oneAttempt(t)
			env := map[string]any{"job": "j", "run": "r1", "task": "main", "attempt": 2, "token": "tok", "pool": "",
				"heartbeat_interval": "50ms", "run_timeout": "1m"}
			if tc.fence != nil {
				env["fence"] = tc.fence
			}
			p.setEnvelope(cfg.Ref, env)
			var got types.TransactWriteItem
			var wire worker.Fence
			var ferr, werr error
			err := worker.RunAttempt(context.Background(), cfg, func(_ context.Context, tk worker.Task) error {
				got, ferr = tk.Fence()
				wire, werr = tk.WireFence()
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if tc.fence == nil {
				if !errors.Is(ferr, worker.ErrNoFence) || !errors.Is(werr, worker.ErrNoFence) {
					t.Fatalf("Fence: %v, WireFence: %v; want ErrNoFence", ferr, werr)
				}
				return
			}
			if ferr != nil || werr != nil {
				t.Fatalf("Fence: %v, WireFence: %v", ferr, werr)
			}
			if got.ConditionCheck == nil || aws.ToString(got.ConditionCheck.TableName) != "ledger" || wire.Key["sk"] != "TASK#main" {
				t.Fatalf("fence %+v, wire %+v: not the claim answer's", got.ConditionCheck, wire)
			}
		})
	}
	if _, err := (worker.Task{Run: "r", Task: "t", Attempt: 1}).Fence(); !errors.Is(err, worker.ErrNoFence) {
		t.Fatalf("a hand-built task's Fence: %v, want ErrNoFence", err)
	}
}

// FenceRefused is the fence's own refusal: the transaction cancelled on
// its first item's condition, however the error was wrapped. A cancel on
// another item, or another error, is not.
func TestFenceRefused(t *testing.T) {
	t.Parallel()
	cancelled := func(codes ...string) error {
		tc := &types.TransactionCanceledException{Message: aws.String("Transaction cancelled")}
		for _, c := range codes {
			tc.CancellationReasons = append(tc.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
		}
		return fmt.Errorf("commit: %w", tc)
	}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"the fence failed", cancelled("ConditionalCheckFailed", "None"), true},
		{"the user's put failed", cancelled("None", "ConditionalCheckFailed"), false},
		{"a conflict", cancelled("TransactionConflict", "None"), false},
		{"no reasons", cancelled(), false},
		{"another error", errors.New("throttled"), false},
		{"nil", nil, false},
	}
	for _, tc := range cases {
		if got := worker.FenceRefused(tc.err); got != tc.want {
			t.Errorf("%s: FenceRefused %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A claim refused for a wrong token (401) runs nothing and reports
// nothing, as a 409 does.
func TestRunAttemptClaimWithAWrongTokenRunsNothing(t *testing.T) {
	p, cfg := oneAttempt(t)
	cfg.Token = "forged"
	err := worker.RunAttempt(context.Background(), cfg, func(context.Context, worker.Task) error {
		t.Error("the handler ran")
		return nil
	})
	if !errors.Is(err, worker.ErrNotClaimed) || !errors.Is(err, worker.ErrInvalidToken) {
		t.Fatalf("error %v, want ErrNotClaimed wrapping ErrInvalidToken", err)
	}
	if claims := p.callsOf("claim", cfg.Ref); len(claims) != 1 || claims[0].Status != http.StatusUnauthorized {
		t.Fatalf("claims %+v, want one refused with 401", claims)
	}
	if n := len(p.callsOf("complete", cfg.Ref)); n != 0 {
		t.Fatalf("%d completions of an unclaimed attempt", n)
	}
}

// A completion refused as stale is the API's decision: RunAttempt sends
// it once, and returns ErrNotReported wrapping ErrStaleAttempt.
func TestRunAttemptStaleCompletionIsNotRetried(t *testing.T) {
	p, cfg := oneAttempt(t)
	p.failCompletes(cfg.Ref, http.StatusConflict, "stale_attempt")
	err := worker.RunAttempt(context.Background(), cfg, func(context.Context, worker.Task) error { return nil })
	if !errors.Is(err, worker.ErrNotReported) || !errors.Is(err, worker.ErrStaleAttempt) {
		t.Fatalf("error %v, want ErrNotReported wrapping ErrStaleAttempt", err)
	}
	if comps := p.callsOf("complete", cfg.Ref); len(comps) != 1 || comps[0].Code != "stale_attempt" {
		t.Fatalf("completions %+v, want one, refused as stale", comps)
	}
}
