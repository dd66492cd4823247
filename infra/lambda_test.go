package main

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// lambdaStatements lists the statements on a function's role that allow
// lambda:InvokeFunction, their resources written as text.
func (s *synthesized) lambdaStatements(function string) [][]string {
	roleID := ref(s.resources[s.functions[function]].Properties["Role"])
	var sts []map[string]any
	for _, r := range s.ofType("AWS::IAM::Policy") {
		roles, _ := r.Properties["Roles"].([]any)
		if slices.ContainsFunc(roles, func(v any) bool { return ref(v) == roleID }) {
			collectStatements("", r.Properties["PolicyDocument"], &sts)
		}
	}
	var out [][]string
	for _, st := range sts {
		if st["Effect"] == "Allow" && slices.Contains(strings1(st["Action"]), "lambda:InvokeFunction") {
			if !reflect.DeepEqual(strings1(st["Action"]), []string{"lambda:InvokeFunction"}) {
				out = append(out, []string{"other actions: " + fmt.Sprint(st["Action"])})
				continue
			}
			out = append(out, templateTexts(st["Resource"]))
		}
	}
	return out
}

// templateTexts writes template values as text: Fn::Join joined, pseudo
// parameters as ${Name}, sorted.
func templateTexts(v any) []string {
	list, ok := v.([]any)
	if !ok {
		list = []any{v}
	}
	var text func(any) string
	text = func(v any) string {
		switch v := v.(type) {
		case string:
			return v
		case map[string]any:
			if id, ok := v["Ref"].(string); ok {
				return "${" + strings.TrimPrefix(id, "AWS::") + "}"
			}
			if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 {
				var parts []string
				for _, p := range asList(j[1]) {
					parts = append(parts, text(p))
				}
				return strings.Join(parts, j[0].(string))
			}
		}
		return fmt.Sprint(v)
	}
	var out []string
	for _, x := range list {
		out = append(out, text(x))
	}
	slices.Sort(out)
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
		qualifiers = append(qualifiers, templateTexts(r.Properties["FunctionName"])[0]+" "+fmt.Sprint(r.Properties["Qualifier"]))
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
