package lambdaexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/protocol"
)

// A local function that fails its invocation (an error, or a panic) sends
// Lambda's on-failure record with its request id and the envelope; one that
// succeeds sends nothing. A function the stack lacks is a refused start.
func TestLocalSendsTheOnFailureRecord(t *testing.T) {
	var mu sync.Mutex
	var records []protocol.InvocationFailure
	local := &lambdaexec.Local{Functions: map[string]lambdaexec.Function{
		"fails":  func(context.Context, json.RawMessage) error { return errors.New("no database") },
		"panics": func(context.Context, json.RawMessage) error { panic("nil map") },
		"works":  func(context.Context, json.RawMessage) error { return nil },
	}}
	local.Bind(context.Background(), "http://127.0.0.1:1", func(_ context.Context, body string) error {
		ev, err := protocol.DecodeEvent(body)
		if err != nil || ev.InvocationFailure == nil {
			t.Errorf("record %s: %v", body, err)
			return err
		}
		mu.Lock()
		records = append(records, *ev.InvocationFailure)
		mu.Unlock()
		return nil
	})
	x := lambdaexec.Executor{Invoker: local}
	ids := map[string]string{}
	for _, fn := range []string{"fails", "panics", "works", "arn:aws:lambda:local:000000000000:function:works"} {
		id, err := x.Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: fn})
		if err != nil {
			t.Fatalf("start %s: %v", fn, err)
		}
		ids[fn] = id
	}
	if _, err := x.Start(context.Background(), env, jobspec.Executor{Type: "lambda", Function: "absent"}); !errors.Is(err, lambdaexec.ErrUnknownFunction) {
		t.Fatalf("start of an absent function: %v", err)
	}
	local.Wait()
	byID := map[string]protocol.InvocationFailure{}
	for _, r := range records {
		byID[r.RequestID] = r
	}
	if len(records) != 2 {
		t.Fatalf("%d records, want 2 (the failing and the panicking function)", len(records))
	}
	f, p := byID[ids["fails"]], byID[ids["panics"]]
	if f.FunctionError != "Handled" || f.ErrorMessage != "no database" || f.Envelope.Token != "tok" || f.Ref() != (protocol.AttemptRef{Run: "01JRUN", Task: "main", Attempt: 2}) {
		t.Errorf("record of the failing function %+v", f)
	}
	if p.FunctionError != "Unhandled" || p.ErrorMessage != "panic: nil map" {
		t.Errorf("record of the panicking function %+v", p)
	}
	if names := local.Names(); len(names) != 3 || names[0] != "fails" {
		t.Errorf("names %v", names)
	}
}
