package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// sdkCalls is the main module's record of each function's AWS calls
// (tests/sdkcalls_test.go drives each function's code path on the
// emulators with an SDK middleware that records them).
const sdkCalls = "../tests/testdata/sdk-calls.json"

type recordedCall struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
}

// TestRolesAllowEveryRecordedCall: every AWS call a function was seen
// making is allowed by that function's role in the synthesized template,
// on that resource. The recorded resources are named by their part
// ("table", "table/index/live", "queue/pool", "queue/events", "bus",
// "ecs:task/batch/*", "ecs:task-definition/etl"); the template's by what
// they refer to.
func TestRolesAllowEveryRecordedCall(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(sdkCalls)
	if err != nil {
		t.Fatal(err)
	}
	var calls map[string][]recordedCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		t.Fatalf("%s: %v", sdkCalls, err)
	}
	for _, fn := range []string{"api", "events", "ticker", "reconciler"} {
		if len(calls[fn]) == 0 {
			t.Errorf("%s: no calls recorded for %s", sdkCalls, fn)
		}
	}
	for fn, list := range calls {
		if _, ok := full.functions[fn]; !ok {
			t.Errorf("%s: calls of %q, which the stack does not deploy", sdkCalls, fn)
			continue
		}
		statements := full.statementsOf(fn)
		for _, c := range list {
			if !allows(full, statements, c) {
				t.Errorf("%s calls %s on %s, which its role does not allow", fn, c.Action, c.Resource)
			}
		}
	}
}

// TestRecordedCallCheckCanFail proves the comparison refuses what a role
// does not grant: the worker's role allows no table call, the api's no
// ECS StopTask.
func TestRecordedCallCheckCanFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fn   string
		call recordedCall
	}{
		{"worker", recordedCall{"dynamodb:GetItem", "table"}},
		{"api", recordedCall{"ecs:StopTask", "ecs:task/batch/*"}},
		{"api", recordedCall{"sqs:SendMessage", "queue/unknown"}},
		{"ticker", recordedCall{"dynamodb:Query", "table/index/listing_v2"}},
	} {
		if allows(full, full.statementsOf(tc.fn), tc.call) {
			t.Errorf("%s: %v allowed", tc.fn, tc.call)
		}
	}
	if !allows(full, full.statementsOf("api"), recordedCall{"dynamodb:Query", "table/index/listing_v2"}) {
		t.Error("api: Query on the listing index refused")
	}
}

// allows reports whether an Allow statement grants c's action on c's
// resource.
func allows(s *synthesized, statements []map[string]any, c recordedCall) bool {
	for _, st := range statements {
		if st["Effect"] != "Allow" || !slices.Contains(strings1(st["Action"]), c.Action) {
			continue
		}
		list, ok := st["Resource"].([]any)
		if !ok {
			list = []any{st["Resource"]}
		}
		for _, r := range list {
			if part(s, r) == c.Resource {
				return true
			}
		}
	}
	return false
}

// part names a template resource by what it is, as the recorder names
// the resources of the calls.
func part(s *synthesized, v any) string {
	if id := ref(v); id != "" {
		switch r := s.resources[id]; {
		case r.Type == "AWS::DynamoDB::Table":
			return "table"
		case r.Type == "AWS::Events::EventBus":
			return "bus"
		case r.Type == "AWS::SQS::Queue":
			switch id {
			case logicalID(s, "EventsQueue"):
				return "queue/events"
			case logicalID(s, "DelayQueue"):
				return "queue/delay"
			}
			for _, pool := range s.cfg.Props.Pools {
				if id == logicalID(s, "PoolQueue-"+pool) {
					return "queue/pool"
				}
			}
		}
		return "resource " + id
	}
	if m, ok := v.(map[string]any); ok {
		if j, ok := m["Fn::Join"].([]any); ok && len(j) == 2 {
			parts, _ := j[1].([]any)
			if len(parts) == 2 && part(s, parts[0]) == "table" {
				if suffix, ok := parts[1].(string); ok {
					return "table" + suffix
				}
			}
		}
	}
	text := render(v)
	if _, rest, ok := strings.Cut(text, ":ecs:${Region}:${AccountId}:"); ok {
		return "ecs:" + strings.TrimSuffix(rest, ":*")
	}
	return text
}
