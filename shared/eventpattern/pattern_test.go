package eventpattern

import (
	"errors"
	"strings"
	"testing"
)

// The events and patterns below are the examples of EventBridge's user
// guide (the pages "Event patterns", "Content filtering in event
// patterns", "Arrays in event patterns" and "Matching null values and
// empty strings"), each with the answer the guide gives.

const ec2StateChange = `{
  "version": "0",
  "id": "7bf73129-1428-4cd3-a780-95db273d1602",
  "detail-type": "EC2 Instance State-change Notification",
  "source": "aws.ec2",
  "account": "123456789012",
  "time": "2015-11-11T21:29:54Z",
  "region": "us-east-1",
  "resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],
  "detail": {"instance-id": "i-abcd1111", "state": "pending"}
}`

const autoscalingLaunch = `{
  "version": "0",
  "id": "3e3c153a-8339-4e30-8c35-687ebef853fe",
  "detail-type": "EC2 Instance Launch Successful",
  "source": "aws.autoscaling",
  "account": "123456789012",
  "time": "2015-11-11T21:31:47Z",
  "region": "us-east-1",
  "resources": [],
  "detail": {"eventVersion": "", "responseElements": null}
}`

const arraysEvent = `{
  "source": "aws.autoscaling",
  "detail-type": "EC2 Instance Launch Successful",
  "resources": [
    "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:eb56d16b-bbf0-401d-b893-d5978ed4a025:autoScalingGroupName/ASGTerminate",
    "arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f"
  ]
}`

const numericEvent = `{
  "source": "com.example",
  "detail-type": "limits",
  "detail": {"c-count": 5, "d-count": 7, "x-limit": 301.8, "state": "running"}
}`

type docCase struct {
	name    string
	event   string
	pattern string
	want    bool
}

var docCases = []docCase{
	// Event patterns: the fields named must all match; others are ignored.
	{"source, detail-type and detail.state", ec2StateChange,
		`{"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"], "detail": {"state": ["pending"]}}`, true},
	{"detail.state terminated", ec2StateChange,
		`{"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"], "detail": {"state": ["terminated"]}}`, false},
	{"any of aws.ec2, aws.fargate", ec2StateChange, `{"source": ["aws.ec2", "aws.fargate"]}`, true},
	{"source only, another", ec2StateChange, `{"source": ["aws.s3"]}`, false},
	{"values are case-sensitive", ec2StateChange, `{"source": ["AWS.EC2"]}`, false},
	{"a field the event lacks", ec2StateChange, `{"detail": {"state": ["pending"], "reason": ["user"]}}`, false},
	{"several detail states", ec2StateChange, `{"detail": {"state": ["running", "pending", "stopping"]}}`, true},

	// Prefix matching: European regions of Auto Scaling.
	{"prefix eu- region", ec2StateChange, `{"source": ["aws.ec2"], "region": [{"prefix": "eu-"}]}`, false},
	{"prefix us- region", ec2StateChange, `{"source": ["aws.ec2"], "region": [{"prefix": "us-"}]}`, true},
	{"prefix ignoring case", `{"detail": {"service": "EVENTBRIDGE"}}`,
		`{"detail": {"service": [{"prefix": {"equals-ignore-case": "EventB"}}]}}`, true},
	{"prefix on a number", numericEvent, `{"detail": {"c-count": [{"prefix": "5"}]}}`, false},

	// Suffix matching: FileName ending .png.
	{"suffix .png", `{"detail": {"FileName": "image.png"}}`, `{"detail": {"FileName": [{"suffix": ".png"}]}}`, true},
	{"suffix .png on .PNG", `{"detail": {"FileName": "image.PNG"}}`, `{"detail": {"FileName": [{"suffix": ".png"}]}}`, false},
	{"suffix ignoring case", `{"detail": {"FileName": "image.PNG"}}`,
		`{"detail": {"FileName": [{"suffix": {"equals-ignore-case": ".png"}}]}}`, true},

	// Equals-ignore-case.
	{"equals-ignore-case", `{"detail": {"name": "ALICE"}}`, `{"detail": {"name": [{"equals-ignore-case": "alice"}]}}`, true},
	{"equals-ignore-case, another", `{"detail": {"name": "Bob"}}`, `{"detail": {"name": [{"equals-ignore-case": "alice"}]}}`, false},

	// Anything-but, with a string, a number, lists, a prefix.
	{"anything-but initializing, pending", ec2StateChange, `{"detail": {"state": [{"anything-but": "initializing"}]}}`, true},
	{"anything-but initializing, initializing", `{"detail": {"state": "initializing"}}`,
		`{"detail": {"state": [{"anything-but": "initializing"}]}}`, false},
	{"anything-but 123, 301.8", numericEvent, `{"detail": {"x-limit": [{"anything-but": 123}]}}`, true},
	{"anything-but 123, 123", `{"detail": {"x-limit": 123}}`, `{"detail": {"x-limit": [{"anything-but": 123}]}}`, false},
	{"anything-but stopped, overloaded: stopped", `{"detail": {"state": "stopped"}}`,
		`{"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}`, false},
	{"anything-but stopped, overloaded: running", numericEvent,
		`{"detail": {"state": [{"anything-but": ["stopped", "overloaded"]}]}}`, true},
	{"anything-but 100, 200, 300: 200", `{"detail": {"x-limit": 200}}`,
		`{"detail": {"x-limit": [{"anything-but": [100, 200, 300]}]}}`, false},
	{"anything-but 100, 200, 300: 301.8", numericEvent,
		`{"detail": {"x-limit": [{"anything-but": [100, 200, 300]}]}}`, true},
	{"anything-but prefix init: initializing", `{"detail": {"state": "initializing"}}`,
		`{"detail": {"state": [{"anything-but": {"prefix": "init"}}]}}`, false},
	{"anything-but prefix init: pending", ec2StateChange,
		`{"detail": {"state": [{"anything-but": {"prefix": "init"}}]}}`, true},
	{"anything-but suffix .png: a.png", `{"detail": {"FileName": "a.png"}}`,
		`{"detail": {"FileName": [{"anything-but": {"suffix": ".png"}}]}}`, false},
	{"anything-but ignoring case: INITIALIZING", `{"detail": {"state": "INITIALIZING"}}`,
		`{"detail": {"state": [{"anything-but": {"equals-ignore-case": "initializing"}}]}}`, false},
	{"anything-but does not match an absent field", ec2StateChange,
		`{"detail": {"reason": [{"anything-but": "x"}]}}`, false},

	// Numeric matching.
	{"numeric ranges and equality", numericEvent,
		`{"detail": {"c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}], "x-limit": [{"numeric": ["=", 3.018e2]}]}}`, true},
	{"numeric > 0 <= 5, 6", `{"detail": {"c-count": 6}}`, `{"detail": {"c-count": [{"numeric": [">", 0, "<=", 5]}]}}`, false},
	{"numeric > 0, 0", `{"detail": {"c-count": 0}}`, `{"detail": {"c-count": [{"numeric": [">", 0]}]}}`, false},
	{"numeric >= 0, 0", `{"detail": {"c-count": 0}}`, `{"detail": {"c-count": [{"numeric": [">=", 0]}]}}`, true},
	{"numeric on a string", `{"detail": {"c-count": "5"}}`, `{"detail": {"c-count": [{"numeric": [">", 0]}]}}`, false},

	// Exists matching (leaf nodes only).
	{"exists true", ec2StateChange, `{"detail": {"state": [{"exists": true}]}}`, true},
	{"exists false on a present field", ec2StateChange, `{"detail": {"state": [{"exists": false}]}}`, false},
	{"exists false on an absent field", ec2StateChange, `{"detail": {"c-count": [{"exists": false}]}}`, true},
	{"exists true on an absent field", ec2StateChange, `{"detail": {"c-count": [{"exists": true}]}}`, false},
	{"exists on an intermediate node", ec2StateChange, `{"detail": [{"exists": true}]}`, false},

	// Arrays: the event's array matches when it meets the pattern's.
	{"resources intersect", arraysEvent,
		`{"resources": ["arn:aws:ec2:us-east-1:123456789012:instance/i-b188560f", "arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f", "arn:aws:ec2:us-east-1:444455556666:instance/i-b188560f"]}`, true},
	{"resources disjoint", arraysEvent,
		`{"resources": ["arn:aws:ec2:us-east-1:111122223333:instance/i-b188560f", "arn:aws:ec2:us-east-1:444455556666:instance/i-b188560f"]}`, false},
	{"resources prefix", arraysEvent, `{"resources": [{"prefix": "arn:aws:ec2:"}]}`, true},

	// Null values and empty strings are not interchangeable.
	{"empty string", autoscalingLaunch, `{"detail": {"eventVersion": [""]}}`, true},
	{"null", autoscalingLaunch, `{"detail": {"responseElements": [null]}}`, true},
	{"empty string is not null", autoscalingLaunch, `{"detail": {"responseElements": [""]}}`, false},
	{"null is not an empty string", autoscalingLaunch, `{"detail": {"eventVersion": [null]}}`, false},

	// A complex example combining matchers.
	{"combined", `{"source": "com.example", "detail": {"state": "running", "c-count": 3, "d-count": 9, "x-limit": 150}}`,
		`{"source": [{"prefix": "com."}], "detail": {"state": [{"anything-but": "initializing"}], "c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}], "x-limit": [{"anything-but": [100, 200, 300]}]}}`, true},
	{"combined, one fails", `{"source": "com.example", "detail": {"state": "running", "c-count": 3, "d-count": 9, "x-limit": 200}}`,
		`{"source": [{"prefix": "com."}], "detail": {"state": [{"anything-but": "initializing"}], "c-count": [{"numeric": [">", 0, "<=", 5]}], "d-count": [{"numeric": ["<", 10]}], "x-limit": [{"anything-but": [100, 200, 300]}]}}`, false},
	{"nested deeper", `{"detail": {"order": {"customer": {"tier": "gold"}}}}`,
		`{"detail": {"order": {"customer": {"tier": ["gold", "platinum"]}}}}`, true},
	{"nested object where the event has a string", `{"detail": {"order": "o-1"}}`,
		`{"detail": {"order": {"id": ["o-1"]}}}`, false},
}

func TestDocumentationExamples(t *testing.T) {
	for _, c := range docCases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Compile([]byte(c.pattern))
			if err != nil {
				t.Fatalf("compile %s: %v", c.pattern, err)
			}
			ev, err := DecodeEvent([]byte(c.event))
			if err != nil {
				t.Fatalf("decode event: %v", err)
			}
			if got := p.Match(ev); got != c.want {
				t.Fatalf("match = %v, want %v\npattern %s\nevent %s", got, c.want, c.pattern, c.event)
			}
		})
	}
}

func TestCompileRefusesNamingThePlace(t *testing.T) {
	for _, c := range []struct{ pattern, path, contains string }{
		{`[]`, "", "non-empty JSON object"},
		{`{}`, "", "non-empty JSON object"},
		{`{"source": "aws.ec2"}`, "source", "list of values"},
		{`{"source": []}`, "source", "empty list"},
		{`{"time": [{"prefix": "2017"}]}`, "time", "not a field"},
		{`{"detail-type": ["x"], "detail_type": ["x"]}`, "detail_type", "not a field"},
		{`{"detail": {}}`, "detail", "empty object"},
		{`{"detail": {"state": [{"wildcard": "a*"}]}}`, "detail.state[0]", `"wildcard" is not a matcher`},
		{`{"detail": {"ip": [{"cidr": "10.0.0.0/24"}]}}`, "detail.ip[0]", `"cidr" is not a matcher`},
		{`{"detail": {"state": [{"prefix": "a", "suffix": "b"}]}}`, "detail.state[0]", "exactly one"},
		{`{"detail": {"state": [{"prefix": 1}]}}`, "detail.state[0].prefix", "string"},
		{`{"detail": {"state": [{"exists": "yes"}]}}`, "detail.state[0].exists", "true or false"},
		{`{"detail": {"n": [{"numeric": [">", "1"]}]}}`, "detail.n[0].numeric[1]", "number"},
		{`{"detail": {"n": [{"numeric": ["!=", 1]}]}}`, "detail.n[0].numeric[0]", "not one of"},
		{`{"detail": {"n": [{"numeric": [">", 1, ">", 2]}]}}`, "detail.n[0].numeric[2]", "second lower bound"},
		{`{"detail": {"n": [{"numeric": [">", 5, "<", 1]}]}}`, "detail.n[0].numeric", "empty range"},
		{`{"detail": {"n": [{"numeric": ["=", 1, "<", 2]}]}}`, "detail.n[0].numeric[0]", "only operator"},
		{`{"detail": {"n": [{"numeric": [">"]}]}}`, "detail.n[0].numeric", "[op, number]"},
		{`{"detail": {"s": [{"anything-but": ["a", 1]}]}}`, "detail.s[0].anything-but", "only strings or only numbers"},
		{`{"detail": {"s": [{"anything-but": []}]}}`, "detail.s[0].anything-but", "empty list"},
		{`{"detail": {"s": [{"anything-but": {"wildcard": "x"}}]}}`, "detail.s[0].anything-but", "prefix, suffix"},
		{`{"detail": {"s": [[1]]}}`, "detail.s[0]", "matcher object"},
		{`{"source": ["a"]} {}`, "", "more JSON"},
		{`{"source": [`, "", "not valid JSON"},
		{`{"source": ["` + strings.Repeat("a", MaxPatternBytes) + `"]}`, "", "over the limit"},
	} {
		_, err := Compile([]byte(c.pattern))
		var ce *CompileError
		if !errors.As(err, &ce) {
			t.Errorf("Compile(%s) = %v, want a *CompileError", c.pattern, err)
			continue
		}
		if ce.Path != c.path || !strings.Contains(ce.Message, c.contains) {
			t.Errorf("Compile(%.80s) = path %q message %q, want path %q message containing %q", c.pattern, ce.Path, ce.Message, c.path, c.contains)
		}
	}
}

func TestExactValues(t *testing.T) {
	p, err := Compile([]byte(`{"source": ["a", "b"], "detail-type": [{"prefix": "x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.ExactValues("source"); !ok || strings.Join(v, ",") != "a,b" {
		t.Errorf("source = %v %v, want [a b] true", v, ok)
	}
	if _, ok := p.ExactValues("detail-type"); ok {
		t.Error("detail-type with a prefix reported exact values")
	}
	if _, ok := p.ExactValues("account"); ok {
		t.Error("an absent field reported exact values")
	}
}

func FuzzCompileMatch(f *testing.F) {
	for _, c := range docCases {
		f.Add([]byte(c.pattern), []byte(c.event))
	}
	f.Add([]byte(`{"detail": {"n": [{"numeric": [">", 1e308, "<", 1e309]}]}}`), []byte(`{"detail": {"n": 1e400}}`))
	f.Add([]byte(`{"detail": {"a": {"b": {"c": [{"exists": false}]}}}}`), []byte(`{"detail": {"a": [1, {"b": 2}]}}`))
	f.Fuzz(func(t *testing.T, pattern, event []byte) {
		p, err := Compile(pattern)
		if err != nil {
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile error %T is not a *CompileError", err)
			}
			return
		}
		ev, err := DecodeEvent(event)
		if err != nil {
			return
		}
		first := p.Match(ev)
		if p.Match(ev) != first {
			t.Fatal("Match is not deterministic")
		}
		hits := NewIndex([]Entry{{Key: "j", Patterns: []*Pattern{p}}}).Match(ev)
		if (len(hits) == 1) != first {
			t.Fatalf("the index answers %v, the pattern %v", hits, first)
		}
	})
}
