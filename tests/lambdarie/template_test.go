package lambdarie

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// cfnTemplate is the part of a synthesized CloudFormation template the
// tests read: its resources.
type cfnTemplate struct {
	Resources map[string]cfnResource `json:"Resources"`
}

type cfnResource struct {
	Type       string          `json:"Type"`
	Properties json.RawMessage `json:"Properties"`
	Metadata   map[string]any  `json:"Metadata"`
}

// path is the resource's construct path ("Runledger/Scheduler/ApiFunction/Resource").
func (r cfnResource) path() string {
	p, _ := r.Metadata["aws:cdk:path"].(string)
	return p
}

// cfnFunction is one of the scheduler's functions as the template deploys it.
type cfnFunction struct {
	Name       string         // api, events, ticker, reconciler, worker
	Resource   string         // logical id
	Env        map[string]any // Environment.Variables, intrinsics unresolved
	Timeout    int            // seconds
	MemorySize int            // MiB
	Handler    string
	Asset      string // the asset folder in cdk.out, from aws:asset:path
}

// readTemplate reads the one stack template in dir (cdk.out).
func readTemplate(dir string) (cfnTemplate, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.template.json"))
	if err != nil {
		return cfnTemplate{}, err
	}
	if len(files) != 1 {
		return cfnTemplate{}, fmt.Errorf("%s holds %d templates (%v), want the one stack's: run make synth", dir, len(files), files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		return cfnTemplate{}, err
	}
	var t cfnTemplate
	if err := json.Unmarshal(b, &t); err != nil {
		return cfnTemplate{}, fmt.Errorf("%s: %w", files[0], err)
	}
	return t, nil
}

// functionPath matches the scheduler's functions: <Name>Function/Resource
// under the Scheduler construct (infra/scheduler: exportName(name)+"Function").
var functionPath = regexp.MustCompile(`/Scheduler/([A-Z][A-Za-z]*)Function/Resource$`)

// functions lists the scheduler's functions by name. Other functions of
// the template (CDK's own helpers) are left out.
func (t cfnTemplate) functions() (map[string]cfnFunction, error) {
	out := map[string]cfnFunction{}
	for id, r := range t.Resources {
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		m := functionPath.FindStringSubmatch(r.path())
		if m == nil {
			continue
		}
		var props struct {
			Environment struct {
				Variables map[string]any `json:"Variables"`
			} `json:"Environment"`
			Timeout    int    `json:"Timeout"`
			MemorySize int    `json:"MemorySize"`
			Handler    string `json:"Handler"`
		}
		if err := json.Unmarshal(r.Properties, &props); err != nil {
			return nil, fmt.Errorf("function %s: %w", id, err)
		}
		asset, _ := r.Metadata["aws:asset:path"].(string)
		name := strings.ToLower(m[1])
		out[name] = cfnFunction{Name: name, Resource: id, Env: props.Environment.Variables,
			Timeout: props.Timeout, MemorySize: props.MemorySize, Handler: props.Handler, Asset: asset}
	}
	return out, nil
}

// locals are the local stand-ins of the template's resources.
type locals struct {
	Table       string
	Pools       map[string]string // pool -> queue URL
	EventsQueue string
	DelayQueue  string
	EventBus    string
	APIURL      string // where the HTTP API's endpoint is served locally
	Region      string
	Account     string
}

// apiMarker stands for the HTTP API's id while a value is resolved: a
// value that names the API is its endpoint, served locally at APIURL.
const apiMarker = "\x00http-api\x00"

// environment resolves a function's environment: every intrinsic
// (Ref, Fn::GetAtt, Fn::Join) becomes the local stand-in of what it names.
// A reference to a resource without one is an error naming the variable,
// so a new wiring in the template cannot go untested unnoticed.
func (t cfnTemplate) environment(fn cfnFunction, l locals) (map[string]string, error) {
	out := map[string]string{}
	names := make([]string, 0, len(fn.Env))
	for k := range fn.Env {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v, err := t.resolve(fn.Env[k], l)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", fn.Name, k, err)
		}
		if strings.Contains(v, apiMarker) {
			v = l.APIURL
		}
		out[k] = v
	}
	return out, nil
}

func (t cfnTemplate) resolve(v any, l locals) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case map[string]any:
		if len(x) != 1 {
			return "", fmt.Errorf("an object of %d keys is no intrinsic function", len(x))
		}
		for fn, arg := range x {
			return t.intrinsic(fn, arg, l)
		}
	}
	return "", fmt.Errorf("value %v (%T) is no string or intrinsic", v, v)
}

func (t cfnTemplate) intrinsic(fn string, arg any, l locals) (string, error) {
	switch fn {
	case "Ref":
		id, _ := arg.(string)
		return t.local(id, "Ref", l)
	case "Fn::GetAtt":
		a, _ := arg.([]any)
		if len(a) != 2 {
			return "", fmt.Errorf("Fn::GetAtt %v: want [resource, attribute]", arg)
		}
		id, _ := a[0].(string)
		attr, _ := a[1].(string)
		return t.local(id, attr, l)
	case "Fn::Join":
		a, _ := arg.([]any)
		if len(a) != 2 {
			return "", fmt.Errorf("Fn::Join %v: want [separator, parts]", arg)
		}
		sep, _ := a[0].(string)
		parts, _ := a[1].([]any)
		out := make([]string, len(parts))
		for i, p := range parts {
			s, err := t.resolve(p, l)
			if err != nil {
				return "", err
			}
			out[i] = s
		}
		return strings.Join(out, sep), nil
	}
	return "", fmt.Errorf("intrinsic %s has no local meaning here", fn)
}

var (
	poolQueuePath = regexp.MustCompile(`/Scheduler/PoolQueue-([^/]+)/Resource$`)
	eventsPath    = regexp.MustCompile(`/Scheduler/EventsQueue/Resource$`)
	delayPath     = regexp.MustCompile(`/Scheduler/DelayQueue/Resource$`)
)

// local is the local value of attribute attr ("Ref" for a Ref) of the
// template's resource id, or of a pseudo parameter.
func (t cfnTemplate) local(id, attr string, l locals) (string, error) {
	switch id {
	case "AWS::Region":
		return l.Region, nil
	case "AWS::AccountId":
		return l.Account, nil
	case "AWS::Partition":
		return "aws", nil
	case "AWS::URLSuffix":
		return "amazonaws.com", nil
	}
	r, ok := t.Resources[id]
	if !ok {
		return "", fmt.Errorf("%s is no resource of the template", id)
	}
	switch {
	case r.Type == "AWS::DynamoDB::Table" && attr == "Ref":
		return l.Table, nil
	case r.Type == "AWS::SQS::Queue" && (attr == "Ref" || attr == "QueueUrl"):
		p := r.path()
		if m := poolQueuePath.FindStringSubmatch(p); m != nil {
			if url, ok := l.Pools[m[1]]; ok {
				return url, nil
			}
			return "", fmt.Errorf("queue %s of pool %q has no local queue", id, m[1])
		}
		switch {
		case eventsPath.MatchString(p):
			return l.EventsQueue, nil
		case delayPath.MatchString(p):
			return l.DelayQueue, nil
		}
	case r.Type == "AWS::Events::EventBus" && (attr == "Ref" || attr == "Name"):
		return l.EventBus, nil
	case r.Type == "AWS::ApiGatewayV2::Api" && (attr == "Ref" || attr == "ApiId" || attr == "ApiEndpoint"):
		return apiMarker, nil
	}
	return "", fmt.Errorf("%s of %s (%s, %s) has no local stand-in", attr, id, r.Type, r.path())
}

// TestTemplateResolution checks the resolution of intrinsics on a small
// template of the shapes CDK writes, without binaries or emulators.
func TestTemplateResolution(t *testing.T) {
	const tmpl = `{"Resources": {
	  "T1": {"Type": "AWS::DynamoDB::Table", "Metadata": {"aws:cdk:path": "S/Scheduler/Table/Resource"}},
	  "Q1": {"Type": "AWS::SQS::Queue", "Metadata": {"aws:cdk:path": "S/Scheduler/PoolQueue-default/Resource"}},
	  "Q2": {"Type": "AWS::SQS::Queue", "Metadata": {"aws:cdk:path": "S/Scheduler/EventsQueue/Resource"}},
	  "Q3": {"Type": "AWS::SQS::Queue", "Metadata": {"aws:cdk:path": "S/Scheduler/PoolQueue-defaultDeadLetter/Resource"}},
	  "B1": {"Type": "AWS::Events::EventBus", "Metadata": {"aws:cdk:path": "S/Scheduler/EventBus/Resource"}},
	  "A1": {"Type": "AWS::ApiGatewayV2::Api", "Metadata": {"aws:cdk:path": "S/Scheduler/Api/Resource"}},
	  "F1": {"Type": "AWS::Lambda::Function", "Metadata": {"aws:cdk:path": "S/Scheduler/WorkerFunction/Resource", "aws:asset:path": "asset.1"},
	    "Properties": {"Timeout": 120, "MemorySize": 256, "Handler": "bootstrap", "Environment": {"Variables": {
	      "RUNLEDGER_TABLE": {"Ref": "T1"},
	      "RUNLEDGER_POOL_QUEUES": {"Fn::Join": ["", ["{\"default\":\"", {"Ref": "Q1"}, "\"}"]]},
	      "RUNLEDGER_EVENTS_QUEUE_URL": {"Ref": "Q2"},
	      "RUNLEDGER_EVENT_BUS": {"Ref": "B1"},
	      "RUNLEDGER_API_URL": {"Fn::GetAtt": ["A1", "ApiEndpoint"]},
	      "RUNLEDGER_API_BASE": {"Fn::Join": ["", ["https://", {"Ref": "A1"}, ".execute-api.", {"Ref": "AWS::Region"}, ".", {"Ref": "AWS::URLSuffix"}, "/"]]},
	      "RUNLEDGER_POOL": "default"}}}},
	  "F2": {"Type": "AWS::Lambda::Function", "Metadata": {"aws:cdk:path": "S/Scheduler/ApiFunction/Resource"},
	    "Properties": {"Environment": {"Variables": {"RUNLEDGER_DLQ": {"Ref": "Q3"}}}}},
	  "F3": {"Type": "AWS::Lambda::Function", "Metadata": {"aws:cdk:path": "S/LogRetentionabc/Resource"}}
	}}`
	var tp cfnTemplate
	if err := json.Unmarshal([]byte(tmpl), &tp); err != nil {
		t.Fatal(err)
	}
	fns, err := tp.functions()
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != 2 || fns["worker"].Timeout != 120 || fns["worker"].Asset != "asset.1" {
		t.Fatalf("functions = %+v, want api and worker (timeout 120, asset.1)", fns)
	}
	l := locals{Table: "tbl", Pools: map[string]string{"default": "http://q/pool"}, EventsQueue: "http://q/events",
		EventBus: "bus", APIURL: "http://127.0.0.1:1", Region: "us-east-1", Account: "123456789012"}
	env, err := tp.environment(fns["worker"], l)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"RUNLEDGER_TABLE": "tbl", "RUNLEDGER_POOL_QUEUES": `{"default":"http://q/pool"}`,
		"RUNLEDGER_EVENTS_QUEUE_URL": "http://q/events", "RUNLEDGER_EVENT_BUS": "bus",
		"RUNLEDGER_API_URL": "http://127.0.0.1:1", "RUNLEDGER_API_BASE": "http://127.0.0.1:1", "RUNLEDGER_POOL": "default",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if len(env) != len(want) {
		t.Errorf("environment = %v, want %v", env, want)
	}
	// A resource without a local stand-in (here a dead-letter queue) is
	// refused with the variable's name.
	if _, err := tp.environment(fns["api"], l); err == nil || !strings.Contains(err.Error(), "RUNLEDGER_DLQ") {
		t.Errorf("environment of an unknown reference: err = %v, want one naming RUNLEDGER_DLQ", err)
	}
}
