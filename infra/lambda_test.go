package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
)

// lambdaStatements lists the resources (as text) of each statement on a
// function's role that allows lambda:InvokeFunction; a statement that
// allows more than that is listed as its actions.
func (s *synthesized) lambdaStatements(function string) [][]string {
	var out [][]string
	for _, st := range withAction(s.statementsOf(function), "lambda:InvokeFunction") {
		if actions := strings1(st["Action"]); !reflect.DeepEqual(actions, []string{"lambda:InvokeFunction"}) {
			out = append(out, actions)
			continue
		}
		out = append(out, renderList(st["Resource"]))
	}
	return out
}

// The lambda executor's grant names exactly the allowed functions (an
// unqualified one under any qualifier, a qualified one under its own), on
// the functions that dispatch and no other; they get the allow-list; each
// allowed function's on-failure destination is the events queue, which the
// events function may send to (it holds a record there until its attempt's
// lease ends). A stack without Lambda props grants no Lambda action.
func TestLambdaExecutorGrants(t *testing.T) {
	t.Parallel()
	want := []string{
		"arn:${Partition}:lambda:${Region}:${AccountId}:function:etl-fn",
		"arn:${Partition}:lambda:${Region}:${AccountId}:function:etl-fn:*",
		"arn:aws:lambda:eu-west-1:123456789012:function:report:live",
	}
	for _, fn := range []string{"api", "events", "ticker", "reconciler", "worker"} {
		got := full.lambdaStatements(fn)
		if fn == "worker" {
			if len(got) != 0 {
				t.Errorf("worker: lambda grants %v, want none", got)
			}
			continue
		}
		if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Errorf("%s: lambda:InvokeFunction statements %v, want one on %v", fn, got, want)
		}
		env, _ := full.resources[full.functions[fn]].Properties["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		var allowed struct {
			LambdaFunctions []string `json:"lambda_functions"`
		}
		raw, _ := vars["RUNLEDGER_EXECUTORS_ALLOWED"].(string)
		if err := json.Unmarshal([]byte(raw), &allowed); err != nil ||
			!reflect.DeepEqual(allowed.LambdaFunctions, []string{"etl-fn", "arn:aws:lambda:eu-west-1:123456789012:function:report:live"}) {
			t.Errorf("%s: RUNLEDGER_EXECUTORS_ALLOWED %q, want the allowed functions", fn, raw)
		}
	}
	events := logicalID(full, "EventsQueue")
	var qualifiers []string
	for id, r := range full.ofType("AWS::Lambda::EventInvokeConfig") {
		dest, _ := r.Properties["DestinationConfig"].(map[string]any)
		onFailure, _ := dest["OnFailure"].(map[string]any)
		if ref(onFailure["Destination"]) != events || dest["OnSuccess"] != nil {
			t.Errorf("%s: destinations %v, want on failure the events queue %s", id, dest, events)
		}
		qualifiers = append(qualifiers, render(r.Properties["FunctionName"])+" "+fmt.Sprint(r.Properties["Qualifier"]))
	}
	slices.Sort(qualifiers)
	if wantQ := []string{
		"arn:${Partition}:lambda:${Region}:${AccountId}:function:etl-fn $LATEST",
		"arn:aws:lambda:eu-west-1:123456789012:function:report live",
	}; !reflect.DeepEqual(qualifiers, wantQ) {
		t.Errorf("invoke configurations %v, want %v", qualifiers, wantQ)
	}
	for fn := range jwt.functions {
		if got := jwt.lambdaStatements(fn); len(got) != 0 {
			t.Errorf("Jwt stack (no Lambda props), %s: lambda grants %v", fn, got)
		}
	}
}
