package scheduler

import (
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/jsii-runtime-go"
)

func TestMain(m *testing.M) {
	code := m.Run()
	jsii.Close()
	os.Exit(code)
}

// codeDir writes a placeholder bootstrap for the named functions.
func codeDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := WritePlaceholders(dir, names...); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	p := Props{}.withDefaults()
	if len(p.Pools) != 1 || p.Pools[0] != DefaultPool || p.TickerRate != time.Minute || p.ReconcilerRate != time.Minute ||
		p.HistoryRetention != 2160*time.Hour || p.DeletionProtection == nil || !*p.DeletionProtection ||
		p.MaxReceiveCount != 5 || p.QueueWaitP99Threshold != 5*time.Minute || p.RemovalPolicy != "RETAIN" ||
		p.MaxClockSkew != 30*time.Second {
		t.Errorf("defaults: %+v", p)
	}
	if len(p.StuckThresholds) != 7 || p.StuckThresholds["UP_FOR_RETRY"] != 15*time.Minute || p.StuckThresholds["PAUSED"] != 0 {
		t.Errorf("stuck thresholds %v, want 15m for each of the 7 timed states", p.StuckThresholds)
	}
	if q := (Props{StuckThresholds: map[string]time.Duration{"RUNNING": 2 * time.Hour}}).withDefaults(); q.StuckThresholds["RUNNING"] != 2*time.Hour || q.StuckThresholds["LOST"] != 15*time.Minute {
		t.Errorf("one state's threshold given: %v", q.StuckThresholds)
	}
	off := false
	if q := (Props{DeletionProtection: &off}).withDefaults(); *q.DeletionProtection {
		t.Error("an explicit false deletion protection was overridden")
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	all := codeDir(t, FunctionNames()...)
	noWorker := codeDir(t, FunctionAPI, FunctionEvents, FunctionTicker, FunctionReconciler)
	for _, tc := range []struct {
		name  string
		props Props
		want  []string // substrings of the error; none means valid
	}{
		{"defaults with code", Props{CodeDir: noWorker}, nil},
		{"example worker with code", Props{CodeDir: all, Pools: []string{"default", "gpu"}, ExampleWorkerPool: "gpu"}, nil},
		{"no code dir", Props{}, []string{"CodeDir is required"}},
		{"worker code missing", Props{CodeDir: noWorker, ExampleWorkerPool: "default"}, []string{"function worker: no executable", "make functions"}},
		{"bad pools", Props{CodeDir: noWorker, Pools: []string{"ok", "ok", "has space", ""}}, []string{`pool "ok": listed twice`, `pool "has space"`, `pool ""`}},
		{"worker pool unknown", Props{CodeDir: all, ExampleWorkerPool: "gpu"}, []string{`example worker pool "gpu"`}},
		{"rates", Props{CodeDir: noWorker, TickerRate: 30 * time.Second, ReconcilerRate: 90 * time.Second}, []string{"TickerRate 30s", "ReconcilerRate 1m30s"}},
		{"retention", Props{CodeDir: noWorker, HistoryRetention: time.Minute}, []string{"HistoryRetention 1m0s"}},
		{"retention under a day", Props{CodeDir: noWorker, HistoryRetention: 23 * time.Hour}, []string{"HistoryRetention 23h0m0s: want 24h..87600h"}},
		{"receive count", Props{CodeDir: noWorker, MaxReceiveCount: 1001}, []string{"MaxReceiveCount 1001"}},
		{"clock skew", Props{CodeDir: noWorker, MaxClockSkew: -time.Second}, []string{"MaxClockSkew -1s"}},
		{"reserved", Props{CodeDir: noWorker, ReservedConcurrency: map[string]int{"apx": 1, "api": -2}}, []string{`unknown function "apx"`, "ReservedConcurrency[api] -2"}},
		{"reserved off", Props{CodeDir: noWorker, ReservedConcurrency: map[string]int{"api": Unreserved}}, nil},
		{"throttle", Props{CodeDir: noWorker, APIRunRate: -1}, []string{"APIRunRate -1"}},
		{"stuck thresholds", Props{CodeDir: noWorker, StuckThresholds: map[string]time.Duration{"PAUSED": time.Hour, "LOST": time.Second}},
			[]string{`unknown state "PAUSED"`, "StuckThresholds[LOST] 1s: want at least 1m"}},
		{"jwt", Props{CodeDir: noWorker, JWT: &JWTAuthorizer{}}, []string{"JWT.Issuer", "JWT.Audiences"}},
		{"ecs", Props{CodeDir: noWorker, ECS: &ECSExecutor{Clusters: []string{"batch"},
			TaskDefinitions: []ECSTaskDefinition{{Family: "etl", TaskRoleArn: "arn:aws:iam::123456789012:role/etl-task"}}}}, nil},
		{"ecs empty", Props{CodeDir: noWorker, ECS: &ECSExecutor{}}, []string{"ECS.Clusters", "ECS.TaskDefinitions"}},
		{"ecs names", Props{CodeDir: noWorker, ECS: &ECSExecutor{Clusters: []string{"a b"},
			TaskDefinitions: []ECSTaskDefinition{{Family: "etl:3", ExecutionRoleArn: "etl-role"}}}}, []string{`"a b"`, `family "etl:3"`, `"etl-role" is not an IAM role ARN`}},
		{"lambda", Props{CodeDir: noWorker, Lambda: &LambdaExecutor{Functions: []string{"etl", "etl:live", "arn:aws:lambda:eu-west-1:123456789012:function:x"}}}, nil},
		{"lambda functions", Props{CodeDir: noWorker, Lambda: &LambdaExecutor{Functions: []string{"ok", "ok", "has space", "arn:aws:s3:::bucket"}}},
			[]string{`"ok" and "ok" name the same function`, `"has space" is not a function`, `"arn:aws:s3:::bucket" is not a function`}},
		// One function under one qualifier, however it is spelled: with
		// WireOnFailure each would get its own EventInvokeConfig, and
		// CloudFormation refuses the second.
		{"lambda spellings of one function", Props{CodeDir: noWorker, Lambda: &LambdaExecutor{WireOnFailure: true, Functions: []string{
			"etl", "etl:$LATEST", "arn:aws:lambda:eu-west-1:123456789012:function:etl",
			"report:live", "arn:aws:lambda:eu-west-1:123456789012:function:report:live"}}},
			[]string{`"etl" and "etl:$LATEST" name the same function etl, qualifier $LATEST`,
				`"etl" and "arn:aws:lambda:eu-west-1:123456789012:function:etl" name the same function`,
				`"report:live" and "arn:aws:lambda:eu-west-1:123456789012:function:report:live" name the same function report, qualifier live`}},
		{"lambda other accounts and qualifiers", Props{CodeDir: noWorker, Lambda: &LambdaExecutor{WireOnFailure: true, Functions: []string{
			"arn:aws:lambda:eu-west-1:123456789012:function:etl", "arn:aws:lambda:eu-west-1:210987654321:function:etl",
			"arn:aws:lambda:us-east-1:123456789012:function:etl", "etl:live", "etl:v2"}}}, nil},
		{"lambda without functions", Props{CodeDir: noWorker, Lambda: &LambdaExecutor{}}, []string{"Lambda.Functions: name at least one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.props.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// No function is reserved unless the props say so: a reservation fails
// the stack's creation in an account with a small concurrency quota.
func TestReservedConcurrencyDefault(t *testing.T) {
	t.Parallel()
	if p := (Props{}).withDefaults(); len(p.ReservedConcurrency) != 0 {
		t.Errorf("default reservations %v, want none", p.ReservedConcurrency)
	}
	mine := map[string]int{FunctionAPI: 20, FunctionWorker: Unreserved}
	if p := (Props{ReservedConcurrency: mine}).withDefaults(); !maps.Equal(p.ReservedConcurrency, mine) {
		t.Errorf("reservations %v, want the caller's %v", p.ReservedConcurrency, mine)
	}
}
