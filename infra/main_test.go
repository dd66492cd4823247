package main

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/runledger/runledger/infra/scheduler"
	"github.com/runledger/runledger/shared/api"
	"github.com/runledger/runledger/shared/tableschema"
)

// Both stacks are synthesized once, in TestMain, and shared by every test:
// a synth costs seconds, a lookup in its template microseconds.
var (
	// full is the app's stack with two pools, the example worker on the
	// first, and an alarm e-mail topic.
	full *synthesized
	// jwt uses a JWT authorizer and deploys no example worker.
	jwt *synthesized
)

type synthesized struct {
	cfg       config
	template  assertions.Template
	resources map[string]resource // by logical id
	outputs   map[string]any
	// logical ids of the scheduler's functions, by function name
	functions map[string]string
	// findings are the stack's unsuppressed errors and warnings, cdk-nag's
	// among them (see nag_test.go).
	findings []finding
}

type resource struct {
	Type       string
	Properties map[string]any
	DependsOn  []string
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	defer jsii.Close()
	dir, err := os.MkdirTemp("", "runledger-infra-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	// Fixture: a placeholder bootstrap per function, standing in for the
	// executables `make functions` writes to dist/.
	codeDir := filepath.Join(dir, "dist")
	if err := scheduler.WritePlaceholders(codeDir, scheduler.FunctionNames()...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	_, ctx, err := projectFile()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if ctx == nil {
		fmt.Fprintln(os.Stderr, "cdk.json not found beside or above infra/: the tests synthesize with its context")
		return 1
	}
	// With this flag (cdk.json sets it) an error annotation aborts the
	// synthesis. The tests read the annotations instead, so that every
	// finding is listed by TestNagAwsSolutions and the other tests still run.
	ctx[annotationsInValidationReport] = false
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(filepath.Join(dir, "cdk.out"))})
	// Build both stacks before the first synthesis: the tree is frozen after it.
	fullStack := build(app, config{
		StackName:  "Full",
		AlarmEmail: "ops@example.com",
		Props: scheduler.Props{
			CodeDir:           codeDir,
			Pools:             []string{"default", "gpu"},
			ExampleWorkerPool: "default",
			ECS: &scheduler.ECSExecutor{Clusters: []string{"batch", "gpu"}, TaskDefinitions: []scheduler.ECSTaskDefinition{
				{Family: "etl", TaskRoleArn: "arn:aws:iam::123456789012:role/etl-task", ExecutionRoleArn: "arn:aws:iam::123456789012:role/ecs-exec"},
				{Family: "report", ExecutionRoleArn: "arn:aws:iam::123456789012:role/ecs-exec"},
			}},
			RunFailedAlarm:  true,
			StuckThresholds: map[string]time.Duration{"RUNNING": 2 * time.Hour},
			Lambda: &scheduler.LambdaExecutor{
				Functions:     []string{"etl-fn", "arn:aws:lambda:eu-west-1:123456789012:function:report:live"},
				WireOnFailure: true,
			},
			EventTriggers: &scheduler.EventTriggers{
				Buses:   []string{"default", "orders"},
				Sources: []string{"shop", "aws.s3"},
			},
		},
	})
	// The Jwt stack also stands for the first deploy of an index migration.
	jwtStack := build(app, config{
		StackName: "Jwt",
		Props: scheduler.Props{
			CodeDir:            codeDir,
			KeepRetiredIndexes: true,
			JWT: &scheduler.JWTAuthorizer{
				Issuer:    "https://issuer.example.com",
				Audiences: []string{"runledger-cli", "runledger-ui"},
			},
		},
	})
	canaryStack := nagCanary(app)
	for _, stack := range []awscdk.Stack{fullStack.stack, jwtStack.stack, canaryStack} {
		applyNag(stack)
	}
	full, jwt = fullStack.synth(), jwtStack.synth()
	canary = findings(canaryStack)
	return m.Run()
}

type built struct {
	cfg       config
	stack     awscdk.Stack
	scheduler *scheduler.Scheduler
}

func build(app awscdk.App, cfg config) built {
	stack, s := newStack(app, cfg)
	return built{cfg, stack, s}
}

func (b built) synth() *synthesized {
	tmpl := assertions.Template_FromStack(b.stack, nil)
	raw := *tmpl.ToJSON()
	out := &synthesized{cfg: b.cfg, template: tmpl, resources: map[string]resource{}, functions: map[string]string{}}
	for id, r := range raw["Resources"].(map[string]any) {
		m := r.(map[string]any)
		props, _ := m["Properties"].(map[string]any)
		res := resource{Type: m["Type"].(string), Properties: props}
		for _, d := range asList(m["DependsOn"]) {
			res.DependsOn = append(res.DependsOn, d.(string))
		}
		out.resources[id] = res
	}
	out.outputs, _ = raw["Outputs"].(map[string]any)
	for name, fn := range b.scheduler.Functions {
		out.functions[name] = *b.stack.GetLogicalId(fn.Node().DefaultChild().(awscdk.CfnElement))
	}
	out.findings = findings(b.stack)
	return out
}

// jsiiMu serializes calls into the jsii runtime: its one child process
// speaks a request/response protocol that concurrent callers interleave.
// The tests run in parallel; only their assertions-package checks queue here.
var jsiiMu sync.Mutex

// check runs an assertions-package check, which panics on failure.
func check(t *testing.T, what string, fn func()) {
	t.Helper()
	jsiiMu.Lock()
	defer jsiiMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	fn()
}

func (s *synthesized) ofType(typ string) map[string]resource {
	out := map[string]resource{}
	for id, r := range s.resources {
		if r.Type == typ {
			out[id] = r
		}
	}
	return out
}

// ref returns the logical id a {"Ref": id} or {"Fn::GetAtt": [id, attr]} points to.
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if id, ok := m["Ref"].(string); ok {
		return id
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
		id, _ := ga[0].(string)
		return id
	}
	return ""
}

func number(v any) float64 {
	f, _ := v.(float64)
	return f
}

func TestResourceCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stack *synthesized
		want  map[string]int
	}{
		{full, map[string]int{
			"AWS::DynamoDB::Table": 1,
			// (2 pools + events + delay + trigger) queues, each with its DLQ.
			"AWS::SQS::Queue":                 10,
			"AWS::SQS::QueuePolicy":           10, // each denies plain HTTP
			"AWS::Lambda::Function":           5,
			"AWS::Logs::LogGroup":             6, // the functions' and the API's access log
			"AWS::IAM::Role":                  5,
			"AWS::IAM::Policy":                5,
			"AWS::Lambda::EventSourceMapping": 4, // events <- events, delay, trigger; worker <- default
			"AWS::Events::Rule":               4, // ticker, reconciler, a trigger rule per bus
			"AWS::ApiGatewayV2::Api":          1,
			"AWS::ApiGatewayV2::Stage":        1,
			"AWS::ApiGatewayV2::Integration":  1,
			"AWS::ApiGatewayV2::Route":        18,
			// One invoke permission per route, one per schedule.
			"AWS::Lambda::Permission": 20,
			// 5 DLQs and the 5 queues' oldest messages + InstanceLost +
			// RunFailed + QueueWaitP99 + errors and throttles of 5
			// functions + throttling of the table and its 3 indexes + the
			// API's 5xx and 429 + 7 stuck states.
			"AWS::CloudWatch::Alarm":     36,
			"AWS::Logs::MetricFilter":    1, // the access log's 429s
			"AWS::Events::EventBus":      1,
			"AWS::CloudWatch::Dashboard": 1,
			"AWS::SNS::Topic":            1,
			"AWS::SNS::TopicPolicy":      1,
			"AWS::SNS::Subscription":     1,
			// The lambda executor's on-failure destination, per function.
			"AWS::Lambda::EventInvokeConfig": 2,
		}},
		{jwt, map[string]int{
			"AWS::DynamoDB::Table":            1,
			"AWS::SQS::Queue":                 6,
			"AWS::SQS::QueuePolicy":           6,
			"AWS::Lambda::Function":           4,
			"AWS::Logs::LogGroup":             5,
			"AWS::IAM::Role":                  4,
			"AWS::IAM::Policy":                4,
			"AWS::Lambda::EventSourceMapping": 2,
			"AWS::Events::Rule":               2,
			"AWS::ApiGatewayV2::Api":          1,
			"AWS::ApiGatewayV2::Stage":        1,
			"AWS::ApiGatewayV2::Integration":  1,
			"AWS::ApiGatewayV2::Authorizer":   1,
			"AWS::ApiGatewayV2::Route":        18,
			"AWS::Lambda::Permission":         20,
			// 3 DLQs and oldest messages, InstanceLost, QueueWaitP99,
			// errors and throttles of 4 functions, the table and its 4
			// indexes (the retired one kept), the API's 5xx and 429, 7
			// stuck states.
			"AWS::CloudWatch::Alarm":     30,
			"AWS::Logs::MetricFilter":    1,
			"AWS::CloudWatch::Dashboard": 1,
			"AWS::Events::EventBus":      1,
		}},
	} {
		t.Run(tc.stack.cfg.StackName, func(t *testing.T) {
			got := map[string]int{}
			for _, r := range tc.stack.resources {
				got[r.Type]++
			}
			// Exact equality also rules out anything unplanned, such as a
			// CDK-generated custom resource with its own role.
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("resource counts:\n got %v\nwant %v", got, tc.want)
			}
			for typ, n := range tc.want {
				check(t, typ, func() { tc.stack.template.ResourceCountIs(jsii.String(typ), jsii.Number(n)) })
			}
		})
	}
}

// TestTableMatchesSchema reads the table back from the template into a
// tableschema.Schema: the stack and the store must agree on every key,
// index and the TTL attribute.
func TestTableMatchesSchema(t *testing.T) {
	t.Parallel()
	tables := full.ofType("AWS::DynamoDB::Table")
	if len(tables) != 1 {
		t.Fatalf("want one table, got %d", len(tables))
	}
	var props map[string]any
	for _, r := range tables {
		props = r.Properties
	}
	types := map[string]tableschema.AttributeType{}
	for _, a := range props["AttributeDefinitions"].([]any) {
		a := a.(map[string]any)
		types[a["AttributeName"].(string)] = tableschema.AttributeType(a["AttributeType"].(string))
	}
	keys := func(schema any) (pk, sk tableschema.Attribute) {
		for _, k := range schema.([]any) {
			k := k.(map[string]any)
			name := k["AttributeName"].(string)
			attr := tableschema.Attribute{Name: name, Type: types[name]}
			switch k["KeyType"] {
			case "HASH":
				pk = attr
			case "RANGE":
				sk = attr
			}
		}
		return pk, sk
	}
	var got tableschema.Schema
	got.PartitionKey, got.SortKey = keys(props["KeySchema"])
	for _, ix := range props["GlobalSecondaryIndexes"].([]any) {
		ix := ix.(map[string]any)
		pk, sk := keys(ix["KeySchema"])
		p := ix["Projection"].(map[string]any)
		idx := tableschema.Index{Name: ix["IndexName"].(string), PartitionKey: pk, SortKey: sk,
			Projection: tableschema.Projection(p["ProjectionType"].(string))}
		for _, a := range asList(p["NonKeyAttributes"]) {
			idx.NonKeyAttributes = append(idx.NonKeyAttributes, a.(string))
		}
		got.Indexes = append(got.Indexes, idx)
	}
	ttl := props["TimeToLiveSpecification"].(map[string]any)
	if ttl["Enabled"] == true {
		got.TTLAttribute, _ = ttl["AttributeName"].(string)
	}
	// A stack deployed fresh or after the migration has no retired index;
	// Replaces is documentation the template does not carry.
	want := tableschema.Table()
	want.Retired = nil
	for i := range want.Indexes {
		want.Indexes[i].Replaces = ""
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("table differs from tableschema.Table():\n got %+v\nwant %+v", got, want)
	}
	if len(types) != len(want.Attributes()) {
		t.Errorf("attribute definitions %v, want exactly %v", types, want.Attributes())
	}

	check(t, "on-demand, PITR, TTL, deletion protection", func() {
		full.template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"BillingMode":                      "PAY_PER_REQUEST",
			"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
			"TimeToLiveSpecification":          map[string]any{"AttributeName": tableschema.TTL, "Enabled": true},
			"DeletionProtectionEnabled":        true,
		})
	})
	check(t, "table retained on removal by default", func() {
		full.template.HasResource(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain",
		})
	})
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestRetiredIndexesKeptForTheMigration: with KeepRetiredIndexes (the Jwt
// stack) the table keeps the retired index of the newest migration (the
// whole-item live index) beside its replacement, and the functions that
// read the replacement may still query the retired one (the code running
// before the deploy does); without it (the Full stack) neither appears,
// and an index retired by an earlier migration (timers, listing) never
// does. The readers
// name the table in their environment, so CloudFormation updates them only
// after the table's update, which ends once the new index is ACTIVE.
func TestRetiredIndexesKeptForTheMigration(t *testing.T) {
	t.Parallel()
	earlier := []string{"/index/" + tableschema.RetiredTimerIndex + "]", "/index/" + tableschema.RetiredListIndex + "]"}
	retiredLive := "/index/" + tableschema.RetiredLiveIndex + "]"
	for _, tc := range []struct {
		s    *synthesized
		keep bool
	}{{full, false}, {jwt, true}} {
		name := tc.s.cfg.StackName
		var tableID string
		var projections []string
		for id, r := range tc.s.ofType("AWS::DynamoDB::Table") {
			tableID = id
			for _, ix := range asList(r.Properties["GlobalSecondaryIndexes"]) {
				ix := ix.(map[string]any)
				projections = append(projections, fmt.Sprint(ix["IndexName"], " ", ix["Projection"].(map[string]any)["ProjectionType"]))
			}
		}
		sort.Strings(projections)
		want := []string{tableschema.ListIndex + " KEYS_ONLY", tableschema.LiveIndex + " INCLUDE", tableschema.TimerIndex + " INCLUDE"}
		if tc.keep {
			want = append(want, tableschema.RetiredLiveIndex+" ALL")
		}
		sort.Strings(want)
		if !reflect.DeepEqual(projections, want) {
			t.Errorf("%s: indexes %v, want %v", name, projections, want)
		}

		var statements []map[string]any
		for id, r := range tc.s.resources {
			collectStatements(id, r.Properties, &statements)
		}
		grants, liveGrants := 0, 0
		for _, st := range statements {
			for _, ix := range earlier {
				if strings.Contains(fmt.Sprint(st["Resource"]), ix) {
					grants++
				}
			}
			if strings.Contains(fmt.Sprint(st["Resource"]), retiredLive) {
				liveGrants++
			}
		}
		// The timers and listing indexes were retired by earlier
		// migrations: a stack migrates one index per deploy pair, so
		// they are never kept again.
		if grants != 0 {
			t.Errorf("%s: %d statements grant the earlier retired indexes, want none", name, grants)
		}
		// The API, the events function, the ticker and the reconciler
		// read the live index: they alone may query the retired one.
		if tc.keep && liveGrants != 4 || !tc.keep && liveGrants != 0 {
			t.Errorf("%s: %d statements grant the retired live index, want %d", name, liveGrants, map[bool]int{true: 4}[tc.keep])
		}

		for _, fn := range []string{scheduler.FunctionTicker, scheduler.FunctionReconciler} {
			vars := tc.s.resources[tc.s.functions[fn]].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
			if got := ref(vars["RUNLEDGER_TABLE"]); got != tableID {
				t.Errorf("%s: %s's RUNLEDGER_TABLE refers to %q, want the table %s", name, fn, got, tableID)
			}
		}
	}
}

func TestEventSources(t *testing.T) {
	t.Parallel()
	type mapping struct{ function, queue string }
	var got []mapping
	for id, r := range full.ofType("AWS::Lambda::EventSourceMapping") {
		if types := r.Properties["FunctionResponseTypes"]; !reflect.DeepEqual(types, []any{"ReportBatchItemFailures"}) {
			t.Errorf("%s: FunctionResponseTypes %v, want [ReportBatchItemFailures]", id, types)
		}
		fn := ref(r.Properties["FunctionName"])
		name := ""
		for n, logical := range full.functions {
			if logical == fn {
				name = n
			}
		}
		got = append(got, mapping{name, ref(r.Properties["EventSourceArn"])})
	}
	s := full
	want := []mapping{
		{scheduler.FunctionEvents, logicalID(s, "EventsQueue")},
		{scheduler.FunctionEvents, logicalID(s, "DelayQueue")},
		{scheduler.FunctionEvents, logicalID(s, "TriggerQueue")},
		{scheduler.FunctionWorker, logicalID(s, "PoolQueue-default")},
	}
	less := func(a, b mapping) int { return strings.Compare(a.function+a.queue, b.function+b.queue) }
	slices.SortFunc(got, less)
	slices.SortFunc(want, less)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("event source mappings:\n got %v\nwant %v", got, want)
	}
}

// logicalID finds the one queue whose logical id starts with the
// scheduler's construct path for id (CDK appends a hash).
func logicalID(s *synthesized, id string) string {
	prefix := "Scheduler" + strings.ReplaceAll(id, "-", "")
	var found []string
	for lid, r := range s.resources {
		if r.Type == "AWS::SQS::Queue" && strings.HasPrefix(lid, prefix) && !strings.HasPrefix(lid, prefix+"DeadLetter") {
			found = append(found, lid)
		}
	}
	if len(found) != 1 {
		return fmt.Sprintf("<%d queues match %s>", len(found), prefix)
	}
	return found[0]
}

// TestVisibilityTimeout: every consumed queue hides a message for at least
// six times its consumer's timeout, and so does every pool queue, whose
// consumers may be the example worker function.
func TestVisibilityTimeout(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		mappings := s.ofType("AWS::Lambda::EventSourceMapping")
		if len(mappings) == 0 {
			t.Fatalf("%s: no event source mappings", s.cfg.StackName)
		}
		for id, r := range mappings {
			queue := s.resources[ref(r.Properties["EventSourceArn"])]
			fn := s.resources[ref(r.Properties["FunctionName"])]
			vis, timeout := number(queue.Properties["VisibilityTimeout"]), number(fn.Properties["Timeout"])
			if timeout == 0 || vis < 6*timeout {
				t.Errorf("%s/%s: visibility timeout %vs, function timeout %vs: want at least 6x", s.cfg.StackName, id, vis, timeout)
			}
		}
	}
	worker := number(full.resources[full.functions[scheduler.FunctionWorker]].Properties["Timeout"])
	for _, pool := range full.cfg.Props.Pools {
		q := full.resources[logicalID(full, "PoolQueue-"+pool)]
		if vis := number(q.Properties["VisibilityTimeout"]); worker == 0 || vis < 6*worker {
			t.Errorf("pool %s: visibility timeout %vs, worker timeout %vs: want at least 6x", pool, vis, worker)
		}
	}
}

func TestQueuesEncryptedWithDeadLetters(t *testing.T) {
	t.Parallel()
	queues := full.ofType("AWS::SQS::Queue")
	dlqs := map[string]bool{}
	sources := 0
	for id, q := range queues {
		if q.Properties["SqsManagedSseEnabled"] != true {
			t.Errorf("%s: not encrypted (SqsManagedSseEnabled %v)", id, q.Properties["SqsManagedSseEnabled"])
		}
		redrive, ok := q.Properties["RedrivePolicy"].(map[string]any)
		if !ok {
			continue
		}
		sources++
		if n := number(redrive["maxReceiveCount"]); n != scheduler.DefaultMaxReceiveCount {
			t.Errorf("%s: maxReceiveCount %v, want %d", id, n, scheduler.DefaultMaxReceiveCount)
		}
		dlq := ref(redrive["deadLetterTargetArn"])
		if _, ok := queues[dlq]; !ok || dlqs[dlq] {
			t.Errorf("%s: DLQ %q missing or shared", id, dlq)
		}
		dlqs[dlq] = true
	}
	// Every queue is either a source with its own DLQ or that DLQ.
	// Pools, events, delay and the trigger queue.
	if want := len(full.cfg.Props.Pools) + 3; sources != want || len(dlqs) != want || len(queues) != 2*want {
		t.Errorf("%d source queues and %d DLQs of %d queues, want %d and %d", sources, len(dlqs), len(queues), want, want)
	}
}

// TestNoWildcardAction scans every policy document anywhere in the
// template (roles, policies, resource policies, CDK-generated ones): no
// statement grants a wildcard action, and the one wildcard present, the
// SSL guard that denies sqs:* over plain HTTP, is on every queue.
func TestNoWildcardAction(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		guards := 0
		for _, r := range s.ofType("AWS::SQS::QueuePolicy") {
			var statements []map[string]any
			collectStatements("", r.Properties, &statements)
			for _, st := range statements {
				if deniesPlainHTTP(st) {
					guards++
				}
			}
		}
		if queues := len(s.ofType("AWS::SQS::Queue")); guards != queues {
			t.Errorf("%s: %d SSL guards for %d queues", s.cfg.StackName, guards, queues)
		}
		var statements []map[string]any
		for id, r := range s.resources {
			collectStatements(id, r.Properties, &statements)
			if arns, ok := r.Properties["ManagedPolicyArns"]; ok {
				t.Errorf("%s/%s: managed policies %v; every permission must be written out", s.cfg.StackName, id, arns)
			}
		}
		if len(statements) < 3*len(s.functions) {
			t.Fatalf("%s: found only %d statements: the scan is not reaching the policies", s.cfg.StackName, len(statements))
		}
		for _, st := range statements {
			if problems := statementProblems(st); len(problems) > 0 {
				t.Errorf("%s: %v in %v", s.cfg.StackName, problems, st)
			}
		}
	}
}

// TestWildcardDetector proves the scan above can fail.
func TestWildcardDetector(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		statement map[string]any
		bad       bool
	}{
		{map[string]any{"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "arn:aws:dynamodb:::table/t"}, false},
		{map[string]any{"Effect": "Allow", "Action": []any{"sqs:SendMessage", "sqs:*"}, "Resource": "arn:aws:sqs:::q"}, true},
		{map[string]any{"Effect": "Allow", "Action": "dynamodb:Get*", "Resource": "arn:aws:dynamodb:::table/t"}, true},
		{map[string]any{"Effect": "Allow", "Action": "*", "Resource": "arn:aws:dynamodb:::table/t"}, true},
		{map[string]any{"Effect": "Allow", "NotAction": "iam:CreateUser", "Resource": "arn:aws:iam:::user/u"}, true},
		{map[string]any{"Effect": "Allow", "Action": "logs:PutLogEvents", "Resource": "*"}, true},
		// The queues' SSL guard passes; any other wildcard, even in a Deny, does not.
		{tlsGuard("Deny", "sqs:*", map[string]any{"AWS": "*"}, "false"), false},
		{tlsGuard("Allow", "sqs:*", map[string]any{"AWS": "*"}, "false"), true},
		{tlsGuard("Deny", "sqs:*", map[string]any{"AWS": "*"}, "true"), true},
		{tlsGuard("Deny", "*", map[string]any{"AWS": "*"}, "false"), true},
		{tlsGuard("Deny", "sns:*", map[string]any{"AWS": "*"}, "false"), true},
		{tlsGuard("Deny", "sqs:*", map[string]any{"AWS": "arn:aws:iam::123456789012:root"}, "false"), true},
		{map[string]any{"Effect": "Deny", "Action": "sqs:*", "Principal": map[string]any{"AWS": "*"}, "Resource": "arn:aws:sqs:::q"}, true},
	} {
		if got := len(statementProblems(tc.statement)) > 0; got != tc.bad {
			t.Errorf("%v: flagged %v, want %v", tc.statement, got, tc.bad)
		}
	}
	var found []map[string]any
	collectStatements("doc", map[string]any{"Policies": []any{map[string]any{"PolicyDocument": map[string]any{
		"Statement": []any{map[string]any{"Action": "s3:*"}}}}}}, &found)
	if len(found) != 1 {
		t.Errorf("nested statement not collected: %v", found)
	}
}

// tlsGuard is a statement in the shape of the queues' SSL guard.
func tlsGuard(effect, action string, principal map[string]any, secureTransport string) map[string]any {
	return map[string]any{
		"Effect":    effect,
		"Action":    action,
		"Principal": principal,
		"Resource":  "arn:aws:sqs:::q",
		"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": secureTransport}},
	}
}

func collectStatements(where string, v any, out *[]map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if k == "Statement" {
				list, ok := child.([]any)
				if !ok {
					list = []any{child}
				}
				for _, st := range list {
					if m, ok := st.(map[string]any); ok {
						*out = append(*out, m)
					}
				}
				continue
			}
			collectStatements(where, child, out)
		}
	case []any:
		for _, child := range v {
			collectStatements(where, child, out)
		}
	}
}

func statementProblems(st map[string]any) []string {
	var problems []string
	if _, ok := st["NotAction"]; ok {
		problems = append(problems, "NotAction")
	}
	if _, ok := st["NotResource"]; ok {
		problems = append(problems, "NotResource")
	}
	for _, a := range strings1(st["Action"]) {
		if strings.Contains(a, "*") && !deniesPlainHTTP(st) {
			problems = append(problems, "wildcard action "+a)
		}
	}
	if st["Effect"] == "Allow" {
		for _, r := range strings1(st["Resource"]) {
			if r == "*" {
				problems = append(problems, "resource *")
			}
		}
	}
	return problems
}

// deniesPlainHTTP reports whether st is the queues' SSL guard, the one
// wildcard action the stack has: it denies every SQS action to everyone
// over plain HTTP, takes permissions away and grants none. cdk-nag's
// AwsSolutions-SQS4 accepts only sqs:* (or *) there; a list of actions
// would leave any action SQS adds later open over HTTP.
func deniesPlainHTTP(st map[string]any) bool {
	principal, _ := st["Principal"].(map[string]any)
	condition, _ := st["Condition"].(map[string]any)
	return st["Effect"] == "Deny" &&
		reflect.DeepEqual(strings1(st["Action"]), []string{"sqs:*"}) &&
		principal["AWS"] == "*" && len(principal) == 1 &&
		reflect.DeepEqual(condition, map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}})
}

// strings1 returns the literal strings of a string-or-list value.
func strings1(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	public := []string{
		"GET /healthz",
		"GET /v1/openapi.json",
		"GET /ui",
		"GET /ui/{proxy+}",
		"POST /v1/attempts/claim",
		"POST /v1/attempts/heartbeat",
		"POST /v1/attempts/complete",
		"POST /v1/runs/{run}/tasks/{task}/signal",
	}
	operator := []string{
		"$default",
		"ANY /v1/jobs",
		"POST /v1/jobs/{job}/runs",
		"ANY /v1/jobs/{proxy+}",
		"ANY /v1/runs",
		"ANY /v1/runs/{proxy+}",
		"ANY /v1/backfills/{proxy+}",
		"GET /v1/events",
		"POST /v1/events/put",
		"GET /metrics",
	}
	for _, tc := range []struct {
		stack *synthesized
		auth  string
	}{{full, "AWS_IAM"}, {jwt, "JWT"}} {
		want := map[string]string{}
		for _, k := range public {
			want[k] = "NONE"
		}
		for _, k := range operator {
			want[k] = tc.auth
		}
		got := map[string]string{}
		for id, r := range tc.stack.ofType("AWS::ApiGatewayV2::Route") {
			key := r.Properties["RouteKey"].(string)
			got[key] = r.Properties["AuthorizationType"].(string)
			_, hasAuthorizer := r.Properties["AuthorizerId"]
			if hasAuthorizer != (got[key] == "JWT") {
				t.Errorf("%s %s: authorizer id present %v with authorization %s", tc.stack.cfg.StackName, id, hasAuthorizer, got[key])
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s routes:\n got %v\nwant %v", tc.stack.cfg.StackName, got, want)
		}
	}
	check(t, "JWT authorizer", func() {
		jwt.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), &map[string]any{
			"AuthorizerType": "JWT",
			"IdentitySource": []any{"$request.header.Authorization"},
			"JwtConfiguration": map[string]any{
				"Issuer":   "https://issuer.example.com",
				"Audience": []any{"runledger-cli", "runledger-ui"},
			},
		})
	})
	check(t, "payload format 2.0 to the api function", func() {
		full.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Integration"), &map[string]any{
			"IntegrationType":      "AWS_PROXY",
			"PayloadFormatVersion": "2.0",
			"IntegrationUri":       map[string]any{"Fn::GetAtt": []any{full.functions[scheduler.FunctionAPI], "Arn"}},
		})
	})
}

// TestEveryHandlerRouteHasAGatewayRoute: every route of the handler's
// route table (shared/api) is matched, as API Gateway matches, by an
// explicit route of the template, not only by $default, and the gateway
// authorizes the operator's routes; the public and worker routes are
// public, but for /metrics, which only the local stack serves.
func TestEveryHandlerRouteHasAGatewayRoute(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		type gw struct{ method, path, auth string }
		var routes []gw
		for _, r := range s.ofType("AWS::ApiGatewayV2::Route") {
			method, path, ok := strings.Cut(r.Properties["RouteKey"].(string), " ")
			if ok {
				routes = append(routes, gw{method, path, r.Properties["AuthorizationType"].(string)})
			}
		}
		handler := api.Routes()
		if len(handler) < 20 {
			t.Fatalf("shared/api lists %d routes: the route table is not being read", len(handler))
		}
		for _, hr := range handler {
			path := samplePath(hr.Pattern)
			best, score := -1, -1
			for i, r := range routes {
				if r.method != hr.Method && r.method != "ANY" {
					continue
				}
				if sc := gatewayMatch(r.path, path); sc >= 0 && (sc*2+btoi(r.method != "ANY")) > score {
					best, score = i, sc*2+btoi(r.method != "ANY")
				}
			}
			if best < 0 {
				t.Errorf("%s: %s %s reaches the function only through $default", s.cfg.StackName, hr.Method, hr.Pattern)
				continue
			}
			gated := routes[best].auth != "NONE"
			want := hr.Operator || hr.Pattern == "/metrics"
			if gated != want {
				t.Errorf("%s: %s %s goes to %s %s (authorization %s), want authorized by the gateway: %v",
					s.cfg.StackName, hr.Method, hr.Pattern, routes[best].method, routes[best].path, routes[best].auth, want)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// samplePath fills a handler pattern's wildcards ("/v1/jobs/{job}",
// "/ui/") with a path API Gateway would see.
func samplePath(pattern string) string {
	var out []string
	for _, seg := range strings.Split(pattern, "/") {
		if strings.HasPrefix(seg, "{") {
			seg = "x"
		}
		out = append(out, seg)
	}
	p := strings.Join(out, "/")
	if strings.HasSuffix(p, "/") && p != "/" {
		p += "index.html"
	}
	return p
}

// gatewayMatch reports whether an HTTP API route path matches path, and
// how specifically (the literal segments before a greedy {proxy+}, plus
// 100 for a route without one); -1 when it does not match.
func gatewayMatch(route, path string) int {
	rs, ps := strings.Split(route, "/"), strings.Split(path, "/")
	for i, seg := range rs {
		if strings.HasSuffix(seg, "+}") {
			if len(ps) <= i || ps[i] == "" {
				return -1
			}
			return i
		}
		if i >= len(ps) || (!strings.HasPrefix(seg, "{") && seg != ps[i]) {
			return -1
		}
	}
	if len(rs) != len(ps) {
		return -1
	}
	return 100 + len(rs)
}

func TestFunctions(t *testing.T) {
	t.Parallel()
	wantEnv := map[string][]string{
		scheduler.FunctionAPI:        {"RUNLEDGER_AUTH", "RUNLEDGER_DELAY_QUEUE_URL", "RUNLEDGER_EVENTS_QUEUE_URL", "RUNLEDGER_EVENT_BUS", "RUNLEDGER_HISTORY_RETENTION", "RUNLEDGER_MAX_CLOCK_SKEW", "RUNLEDGER_POOL_QUEUES", "RUNLEDGER_TABLE"},
		scheduler.FunctionEvents:     {"RUNLEDGER_DELAY_QUEUE_URL", "RUNLEDGER_EVENTS_QUEUE_URL", "RUNLEDGER_EVENT_BUS", "RUNLEDGER_HISTORY_RETENTION", "RUNLEDGER_MAX_CLOCK_SKEW", "RUNLEDGER_POOL_QUEUES", "RUNLEDGER_TABLE"},
		scheduler.FunctionTicker:     {"RUNLEDGER_DELAY_QUEUE_URL", "RUNLEDGER_EVENT_BUS", "RUNLEDGER_HISTORY_RETENTION", "RUNLEDGER_MAX_CLOCK_SKEW", "RUNLEDGER_POOL_QUEUES", "RUNLEDGER_TABLE", "RUNLEDGER_TICKER_PERIOD"},
		scheduler.FunctionReconciler: {"RUNLEDGER_DELAY_QUEUE_URL", "RUNLEDGER_EVENT_BUS", "RUNLEDGER_HISTORY_RETENTION", "RUNLEDGER_MAX_CLOCK_SKEW", "RUNLEDGER_POOL_QUEUES", "RUNLEDGER_TABLE"},
		scheduler.FunctionWorker:     {"RUNLEDGER_API_URL", "RUNLEDGER_EVENTS_QUEUE_URL", "RUNLEDGER_POOL"},
	}
	// The full stack allows the ecs and lambda executors: the functions
	// that dispatch also get their allow-lists and the API's URL
	// (TestECSGrants, TestLambdaExecutorGrants); it has EventTriggers, so
	// the events function knows the trigger queue (TestTriggerRules).
	wantEnv[scheduler.FunctionEvents] = append(wantEnv[scheduler.FunctionEvents], "RUNLEDGER_TRIGGER_QUEUE_ARN")
	for _, name := range []string{scheduler.FunctionAPI, scheduler.FunctionEvents, scheduler.FunctionTicker, scheduler.FunctionReconciler} {
		wantEnv[name] = append(wantEnv[name], "RUNLEDGER_API_URL", "RUNLEDGER_EXECUTORS_ALLOWED")
		sort.Strings(wantEnv[name])
	}
	if len(full.functions) != len(wantEnv) {
		t.Fatalf("functions %v, want %d", full.functions, len(wantEnv))
	}
	for name, id := range full.functions {
		p := full.resources[id].Properties
		if p["Runtime"] != "provided.al2023" || !reflect.DeepEqual(p["Architectures"], []any{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v, architectures %v, handler %v", name, p["Runtime"], p["Architectures"], p["Handler"])
		}
		vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		var keys []string
		for k := range vars {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !reflect.DeepEqual(keys, wantEnv[name]) {
			t.Errorf("%s: environment %v, want %v", name, keys, wantEnv[name])
		}
		logs := full.resources[ref(p["LoggingConfig"].(map[string]any)["LogGroup"])]
		if logs.Type != "AWS::Logs::LogGroup" || number(logs.Properties["RetentionInDays"]) != 30 {
			t.Errorf("%s: log group %v, want an explicit one with 30 days' retention", name, logs)
		}
	}
	api := full.resources[full.functions[scheduler.FunctionAPI]].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
	if api["RUNLEDGER_AUTH"] != "gateway" {
		t.Errorf("api RUNLEDGER_AUTH %v, want gateway", api["RUNLEDGER_AUTH"])
	}
	if api["RUNLEDGER_MAX_CLOCK_SKEW"] != "30s" {
		t.Errorf("api RUNLEDGER_MAX_CLOCK_SKEW %v, want 30s", api["RUNLEDGER_MAX_CLOCK_SKEW"])
	}
	if api["RUNLEDGER_HISTORY_RETENTION"] != "2160h0m0s" {
		t.Errorf("api RUNLEDGER_HISTORY_RETENTION %v, want 2160h0m0s", api["RUNLEDGER_HISTORY_RETENTION"])
	}
	ticker := full.resources[full.functions[scheduler.FunctionTicker]].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
	if ticker["RUNLEDGER_TICKER_PERIOD"] != "1m0s" {
		t.Errorf("ticker RUNLEDGER_TICKER_PERIOD %v, want 1m0s (the schedule's rate)", ticker["RUNLEDGER_TICKER_PERIOD"])
	}
	pools, _ := api["RUNLEDGER_POOL_QUEUES"].(map[string]any)["Fn::Join"].([]any)
	if got := fmt.Sprint(pools); !strings.Contains(got, `{"default":"`) || !strings.Contains(got, `,"gpu":"`) {
		t.Errorf("RUNLEDGER_POOL_QUEUES %v: want a JSON object of both pools", got)
	}
}

func TestSchedules(t *testing.T) {
	t.Parallel()
	targets := map[string]string{}
	for id, r := range full.ofType("AWS::Events::Rule") {
		if r.Properties["EventPattern"] != nil {
			continue // a trigger rule (TestTriggerRules)
		}
		if r.Properties["ScheduleExpression"] != "rate(1 minute)" || r.Properties["State"] != "ENABLED" {
			t.Errorf("%s: schedule %v, state %v", id, r.Properties["ScheduleExpression"], r.Properties["State"])
		}
		for _, target := range r.Properties["Targets"].([]any) {
			targets[ref(target.(map[string]any)["Arn"])] = id
		}
	}
	for _, name := range []string{scheduler.FunctionTicker, scheduler.FunctionReconciler} {
		if _, ok := targets[full.functions[name]]; !ok {
			t.Errorf("%s: no schedule targets it (targets %v)", name, targets)
		}
	}
	if len(targets) != 2 {
		t.Errorf("schedules target %v, want ticker and reconciler only", targets)
	}
}

func TestAlarms(t *testing.T) {
	t.Parallel()
	var topic string
	for id := range full.ofType("AWS::SNS::Topic") {
		topic = id
	}
	byMetric := map[string]int{}
	dlqAlarmed := map[string]bool{}
	stuck := map[string]float64{} // state -> threshold in seconds
	for id, r := range full.ofType("AWS::CloudWatch::Alarm") {
		p := r.Properties
		metric := fmt.Sprintf("%v/%v", p["Namespace"], p["MetricName"])
		if p["Metrics"] != nil {
			metric = "math" // TestThrottlingAlarms
		}
		byMetric[metric]++
		for _, list := range []string{"AlarmActions", "OKActions"} {
			actions, _ := p[list].([]any)
			if len(actions) != 1 || ref(actions[0]) != topic {
				t.Errorf("%s: %s %v, want the alarm topic %s", id, list, actions, topic)
			}
		}
		switch metric {
		case "AWS/SQS/ApproximateNumberOfMessagesVisible":
			dims := p["Dimensions"].([]any)
			dlqAlarmed[ref(dims[0].(map[string]any)["Value"])] = true
		case "Runledger/QueueWait":
			if p["ExtendedStatistic"] != "p99" || number(p["Threshold"]) != 300000 {
				t.Errorf("queue wait alarm: statistic %v threshold %v, want p99 over 300000 ms", p["ExtendedStatistic"], p["Threshold"])
			}
		case "Runledger/OverdueInState":
			dims := p["Dimensions"].([]any)
			dim := dims[0].(map[string]any)
			stuck[fmt.Sprint(dim["Value"])] = number(p["Threshold"])
			if len(dims) != 1 || dim["Name"] != "State" || p["Statistic"] != "Maximum" || p["ComparisonOperator"] != "GreaterThanThreshold" {
				t.Errorf("stuck alarm %s: %v", id, p)
			}
		case "Runledger/InstanceLost", "Runledger/RunFailed":
			if p["Statistic"] != "Sum" || number(p["Threshold"]) != 1 || p["ComparisonOperator"] != "GreaterThanOrEqualToThreshold" || p["Dimensions"] != nil {
				t.Errorf("%s alarm: %v", metric, p)
			}
		}
	}
	want := map[string]int{
		"AWS/SQS/ApproximateNumberOfMessagesVisible": 5,
		"Runledger/InstanceLost":                     1,
		"Runledger/RunFailed":                        1,
		"Runledger/QueueWait":                        1,
		"AWS/Lambda/Errors":                          5,
		"AWS/Lambda/Throttles":                       5,
		"AWS/SQS/ApproximateAgeOfOldestMessage":      5,
		"AWS/ApiGateway/5xx":                         1,
		"Runledger/ApiThrottled":                     1,
		"math":                                       4,
		"Runledger/OverdueInState":                   7,
	}
	if !reflect.DeepEqual(byMetric, want) {
		t.Errorf("alarms by metric:\n got %v\nwant %v", byMetric, want)
	}
	// The props set RUNNING's threshold; every other state has the default.
	wantStuck := map[string]float64{"CREATED": 900, "SCHEDULED": 900, "QUEUED": 900, "RUNNING": 7200, "UP_FOR_RETRY": 900, "LOST": 900, "CANCELLING": 900}
	if !reflect.DeepEqual(stuck, wantStuck) {
		t.Errorf("stuck alarms' thresholds (s) %v, want %v", stuck, wantStuck)
	}
	for id, q := range full.ofType("AWS::SQS::Queue") {
		isDLQ := q.Properties["RedrivePolicy"] == nil
		if isDLQ != dlqAlarmed[id] {
			t.Errorf("queue %s: DLQ %v, alarmed %v", id, isDLQ, dlqAlarmed[id])
		}
	}
	if len(full.ofType("AWS::CloudWatch::Dashboard")) != 1 {
		t.Error("no dashboard")
	}
	for _, d := range full.ofType("AWS::CloudWatch::Dashboard") {
		body := fmt.Sprint(d.Properties["DashboardBody"])
		for _, m := range []string{"RunSucceeded", "RunFailed", "TaskFailed", "DeadlineMissed", "RunDuration", "OverdueInState", "TransitionLag", "CompletionDeviation"} {
			if !strings.Contains(body, `\"`+m+`\"`) && !strings.Contains(body, `"`+m+`"`) {
				t.Errorf("the dashboard shows no %s", m)
			}
		}
	}
}

// TestThrottlingAlarms: alarms on DynamoDB's throttling of the table and
// of each of its indexes (reads and writes together), on the API's 5xx
// and on its 429s (counted from the access log, HTTP APIs publish no
// such metric), and on the age of the oldest message of every queue.
func TestThrottlingAlarms(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s       *synthesized
		indexes []string
	}{
		{full, []string{"", tableschema.ListIndex, tableschema.LiveIndex, tableschema.TimerIndex}},
		{jwt, []string{"", tableschema.ListIndex, tableschema.LiveIndex, tableschema.RetiredLiveIndex, tableschema.TimerIndex}},
	} {
		name := tc.s.cfg.StackName
		var table, api, accessLogs string
		for id := range tc.s.ofType("AWS::DynamoDB::Table") {
			table = id
		}
		for id := range tc.s.ofType("AWS::ApiGatewayV2::Api") {
			api = id
		}
		for _, f := range tc.s.ofType("AWS::Logs::MetricFilter") {
			accessLogs = ref(f.Properties["LogGroupName"])
			transforms := asList(f.Properties["MetricTransformations"])
			if !strings.Contains(fmt.Sprint(f.Properties["FilterPattern"]), `$.status = "429"`) || len(transforms) != 1 ||
				fmt.Sprint(transforms[0].(map[string]any)["MetricName"]) != "ApiThrottled" {
				t.Errorf("%s: metric filter %v, want the access log's 429s as Runledger/ApiThrottled", name, f.Properties)
			}
		}
		if tc.s.resources[accessLogs].Type != "AWS::Logs::LogGroup" {
			t.Errorf("%s: the 429 filter reads %q, want the access log group", name, accessLogs)
		}
		var throttled []string
		aged := map[string]bool{}
		api5xx, api429 := 0, 0
		for id, r := range tc.s.ofType("AWS::CloudWatch::Alarm") {
			p := r.Properties
			dims := map[string]string{}
			for _, d := range asList(p["Dimensions"]) {
				d := d.(map[string]any)
				dims[d["Name"].(string)] = ref(d["Value"])
			}
			switch fmt.Sprintf("%v/%v", p["Namespace"], p["MetricName"]) {
			case "AWS/SQS/ApproximateAgeOfOldestMessage":
				if number(p["Threshold"]) != 1800 || p["Statistic"] != "Maximum" {
					t.Errorf("%s/%s: threshold %v statistic %v, want the maximum over 1800 s", name, id, p["Threshold"], p["Statistic"])
				}
				aged[dims["QueueName"]] = true
			case "AWS/ApiGateway/5xx":
				if dims["ApiId"] != api {
					t.Errorf("%s/%s: dimensions %v, want the API %s", name, id, dims, api)
				}
				api5xx++
			case "Runledger/ApiThrottled":
				api429++
			}
			var reads, writes []string
			for _, m := range asList(p["Metrics"]) {
				stat, _ := m.(map[string]any)["MetricStat"].(map[string]any)
				metric, _ := stat["Metric"].(map[string]any)
				if metric["Namespace"] != "AWS/DynamoDB" {
					continue
				}
				index, tableRef := "", ""
				for _, d := range asList(metric["Dimensions"]) {
					d := d.(map[string]any)
					switch d["Name"] {
					case "GlobalSecondaryIndexName":
						index = d["Value"].(string)
					case "TableName":
						tableRef = ref(d["Value"])
					}
				}
				if tableRef != table {
					t.Errorf("%s/%s: throttling of table %q, want %s", name, id, tableRef, table)
				}
				switch metric["MetricName"] {
				case "ReadThrottleEvents":
					reads = append(reads, index)
				case "WriteThrottleEvents":
					writes = append(writes, index)
				}
			}
			if len(reads)+len(writes) > 0 {
				if len(reads) != 1 || !reflect.DeepEqual(reads, writes) {
					t.Errorf("%s/%s: read throttles of %v and write throttles of %v, want both of one table or index", name, id, reads, writes)
					continue
				}
				throttled = append(throttled, reads[0])
			}
		}
		sort.Strings(throttled)
		sort.Strings(tc.indexes)
		if !reflect.DeepEqual(throttled, tc.indexes) {
			t.Errorf("%s: throttling alarms on %q (\"\": the table), want %q", name, throttled, tc.indexes)
		}
		if api5xx != 1 || api429 != 1 {
			t.Errorf("%s: %d 5xx and %d 429 alarms, want one each", name, api5xx, api429)
		}
		for id, q := range tc.s.ofType("AWS::SQS::Queue") {
			if isDLQ := q.Properties["RedrivePolicy"] == nil; isDLQ == aged[id] {
				t.Errorf("%s: queue %s (DLQ %v): age alarmed %v, want every queue but the DLQs", name, id, isDLQ, aged[id])
			}
		}
	}
}

// TestEventBus: the stack creates the bus, the four scheduler functions
// name it in RUNLEDGER_EVENT_BUS and may put events on it, and nothing
// may put events anywhere else.
func TestEventBus(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		var bus string
		for id := range s.ofType("AWS::Events::EventBus") {
			bus = id
		}
		if bus == "" {
			t.Fatalf("%s: no event bus", s.cfg.StackName)
		}
		publishers := map[string]bool{}
		for id, r := range s.ofType("AWS::IAM::Policy") {
			var statements []map[string]any
			collectStatements(id, r.Properties, &statements)
			for _, st := range statements {
				if !strings.Contains(fmt.Sprint(st["Action"]), "events:") {
					continue
				}
				if st["Action"] != "events:PutEvents" || ref(st["Resource"]) != bus {
					t.Errorf("%s/%s: %v on %v, want events:PutEvents on the bus %s only", s.cfg.StackName, id, st["Action"], st["Resource"], bus)
				}
				for _, role := range r.Properties["Roles"].([]any) {
					publishers[ref(role)] = true
				}
			}
		}
		for name, id := range s.functions {
			p := s.resources[id].Properties
			vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			want := name != scheduler.FunctionWorker
			if got := ref(vars["RUNLEDGER_EVENT_BUS"]) == bus; got != want {
				t.Errorf("%s/%s: RUNLEDGER_EVENT_BUS %v, want the bus: %t", s.cfg.StackName, name, vars["RUNLEDGER_EVENT_BUS"], want)
			}
			if got := publishers[ref(p["Role"])]; got != want {
				t.Errorf("%s/%s: may put events %t, want %t", s.cfg.StackName, name, got, want)
			}
		}
	}
	if got := ref(full.outputs["EventBusName"].(map[string]any)["Value"]); full.resources[got].Type != "AWS::Events::EventBus" {
		t.Errorf("output EventBusName %v: want the bus", full.outputs["EventBusName"])
	}
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"ApiUrl", "Region", "ExecuteApiArn", "TableName", "TableArn", "EventsQueueUrl", "EventsQueueArn", "DelayQueueUrl", "PoolQueueUrls", "DeadLetterQueueUrls", "DashboardName", "EventBusName"} {
		if _, ok := full.outputs[name]; !ok {
			t.Errorf("output %s missing (have %v)", name, full.outputs)
		}
	}
	api := full.outputs["ApiUrl"].(map[string]any)["Value"]
	if got := fmt.Sprint(api); !strings.Contains(got, "ApiEndpoint") {
		t.Errorf("ApiUrl %v: want the HTTP API endpoint", got)
	}
}

// TestRouteThrottles: every route has a throttle of its own on the stage,
// so that no route's traffic takes another's: the routes a run calls
// (its trigger, the worker routes, events put) admit 1,000 runs a
// second, the heat model's rate for one job, where one stage throttle of
// 100 requests a second admitted about 33; the operator's other routes
// 100 requests a second, the anonymous ones and $default 10; each burst
// twice its rate. Together they stay under API Gateway's default account
// quota of 10,000 requests a second, and the stage waits for the routes
// its settings name.
func TestRouteThrottles(t *testing.T) {
	t.Parallel()
	type throttle struct{ rate, burst float64 }
	run, operator, public := throttle{1000, 2000}, throttle{100, 200}, throttle{10, 20}
	want := map[string]throttle{
		"POST /v1/jobs/{job}/runs":    run,
		"POST /v1/events/put":         run,
		"POST /v1/attempts/claim":     run,
		"POST /v1/attempts/heartbeat": run,
		"POST /v1/attempts/complete":  run,
		"GET /healthz":                public,
		"GET /v1/openapi.json":        public,
		"GET /ui":                     public,
		"GET /ui/{proxy+}":            public,
	}
	of := func(v any) throttle {
		m, _ := v.(map[string]any)
		return throttle{number(m["ThrottlingRateLimit"]), number(m["ThrottlingBurstLimit"])}
	}
	for _, s := range []*synthesized{full, jwt} {
		name := s.cfg.StackName
		stages := s.ofType("AWS::ApiGatewayV2::Stage")
		if len(stages) != 1 {
			t.Fatalf("%s: %d stages", name, len(stages))
		}
		var stageID string
		var props map[string]any
		for id, st := range stages {
			stageID, props = id, st.Properties
		}
		if got := of(props["DefaultRouteSettings"]); got != public {
			t.Errorf("%s: $default throttle %v, want %v", name, got, public)
		}
		settings, _ := props["RouteSettings"].(map[string]any)
		total := public.rate // $default
		for id, r := range s.ofType("AWS::ApiGatewayV2::Route") {
			key := r.Properties["RouteKey"].(string)
			if key == "$default" {
				continue
			}
			w, ok := want[key]
			if !ok {
				w = operator
			}
			got := of(settings[key])
			if got != w {
				t.Errorf("%s: route %s throttle %v, want %v", name, key, got, w)
			}
			total += got.rate
			if !slices.Contains(s.resources[stageID].DependsOn, id) {
				t.Errorf("%s: the stage does not wait for route %s (%s), which its settings name", name, key, id)
			}
		}
		if len(settings) != len(scheduler.Routes()) {
			t.Errorf("%s: route settings for %d keys, want one for each of the %d routes", name, len(settings), len(scheduler.Routes()))
		}
		if total > 10000 {
			t.Errorf("%s: the routes' rates add up to %v, over the account's default 10,000 requests a second", name, total)
		}
	}
}

// TestNoReservedConcurrency: no function reserves concurrency by default,
// which would fail the stack's creation in an account with a small
// concurrency quota.
func TestNoReservedConcurrency(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		for name, id := range s.functions {
			if got, set := s.resources[id].Properties["ReservedConcurrentExecutions"]; set {
				t.Errorf("%s/%s: reserved concurrency %v, want none", s.cfg.StackName, name, got)
			}
		}
	}
}
