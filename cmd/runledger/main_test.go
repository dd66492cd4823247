package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/cobra"

	"github.com/runledger/runledger/client"
	"github.com/runledger/runledger/shared/localinfo"
)

// `runledger local` parsed its flags with Go's flag package, which takes
// -addr and --addr alike; every spelling that worked still does.
func TestLocalKeepsSingleDashFlags(t *testing.T) {
	t.Setenv("RUNLEDGER_ADDR", "")
	cases := []struct {
		args             []string
		addr, data, info string
		verbose          bool
	}{
		{[]string{"local"}, "127.0.0.1:8080", ".runledger/dynamodb", ".runledger/local.json", false},
		{[]string{"local", "-addr", "127.0.0.1:9", "-data", "", "-v"}, "127.0.0.1:9", "", ".runledger/local.json", true},
		{[]string{"local", "-addr=127.0.0.1:9", "-data=", "-info=x.json"}, "127.0.0.1:9", "", "x.json", false},
		{[]string{"local", "--addr", "127.0.0.1:9", "--v", "-info", "y.json"}, "127.0.0.1:9", ".runledger/dynamodb", "y.json", true},
		{[]string{"local", "-v=true", "--data", "d"}, "127.0.0.1:8080", "d", ".runledger/local.json", true},
	}
	for _, c := range cases {
		root := newRoot()
		args := singleDashLongFlags(root, c.args)
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		fl := cmd.Flags()
		addr, _ := fl.GetString("addr")
		data, _ := fl.GetString("data")
		info, _ := fl.GetString("info")
		verbose, _ := fl.GetBool("verbose")
		if addr != c.addr || data != c.data || info != c.info || verbose != c.verbose {
			t.Errorf("%q: addr %q data %q info %q verbose %v, want %q %q %q %v", c.args, addr, data, info, verbose, c.addr, c.data, c.info, c.verbose)
		}
	}
}

func TestSingleDashStopsAtDoubleDash(t *testing.T) {
	t.Parallel()
	got := singleDashLongFlags(newRoot(), []string{"local", "-addr", "x", "--", "-data"})
	if strings.Join(got, " ") != "local --addr x -- -data" {
		t.Errorf("got %q", got)
	}
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bogus"},
		{"local", "--nope"},
		{"local", "extra"},
		{"local", "--allow", "sh"}, // exec flags without --exec-pool
		{"worker"},
		{"worker", "exec", "--allow", "sh"}, // no --pool
		{"worker", "exec", "--pool", "p"},   // no --allow
		{"worker", "exec", "--pool", "p", "--allow", "["}, // bad pattern
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--concurrency", "0"},
		{"local", "--allow-env", "REGION"}, // the new exec flags need --exec-pool too
		{"local", "--pass-env", "AWS_PROFILE"},
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--allow-env", "RUNLEDGER_API_KEY"}, // the worker's own
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--allow-env", "["},
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--allow-dir", "/no/such/dir/rl"},
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--pass-env", "A=B"},
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--user", "no-such-user-rl"},
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--user", "0"}, // root: refused, commands run as another user than root
		{"local", "--user", "nobody"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "--help") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a pointer to --help", args, code, stderr)
		}
	}
}

// Every command's help lists its flags and at least one example.
func TestHelpListsFlagsAndExamples(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		code, out, _ := runCLI(t, append(path, "--help")...)
		if code != exitOK || !strings.Contains(out, "Flags:") || !strings.Contains(out, "Examples:") {
			t.Errorf("%s --help: exit %d, want 0 with Flags: and Examples:\n%s", c.CommandPath(), code, out)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}

// `local --exec-pool` adds a command-running worker to the stack, its pool
// created with it; its exec flags alone are a usage error.
func TestLocalExecPool(t *testing.T) {
	t.Parallel()
	var got localFlags
	cmd := localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
	cmd.SetArgs([]string{"--exec-pool", "shell", "--allow", "sh", "--allow", "/srv/bin/*", "--exec-concurrency", "3",
		"--allow-env", "DAY", "--allow-env", "APP_*", "--allow-dir", t.TempDir(), "--pass-env", "AWS_PROFILE"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	opts, err := got.options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Parts) != 1 || opts.Parts[0].Name != "worker exec-shell" || !slices.Equal(opts.Parts[0].Pools, []string{"shell"}) ||
		opts.Parts[0].Start == nil || got.exec.concurrency != 3 || !opts.DemoWorker {
		t.Errorf("options = %+v, exec concurrency %d", opts, got.exec.concurrency)
	}
	if !slices.Equal(got.exec.allowEnv, []string{"DAY", "APP_*"}) || len(got.exec.allowDir) != 1 || !slices.Equal(got.exec.passEnv, []string{"AWS_PROFILE"}) {
		t.Errorf("exec flags %+v: --allow-env, --allow-dir or --pass-env lost", got.exec)
	}

	cmd = localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if opts, err := got.options(nil); err != nil || len(opts.Parts) != 0 {
		t.Errorf("without --exec-pool: %+v, %v", opts.Parts, err)
	}
}

// `local --lambda NAME=CMD` adds the lambda executor with those functions,
// which job definitions may then name; a malformed one is a usage error.
func TestLocalLambda(t *testing.T) {
	t.Parallel()
	var got localFlags
	cmd := localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
	cmd.SetArgs([]string{"--lambda", "report=python3 /app/report.py --day {{.LogicalDate}}", "--lambda", "sh-fn=sh -c true"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	opts, err := got.options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Parts) != 1 || opts.Parts[0].Name != "lambda" || len(opts.Parts[0].Executors) != 1 ||
		!slices.Equal(opts.Parts[0].Allowed.LambdaFunctions, []string{"report", "sh-fn"}) {
		t.Errorf("parts %+v", opts.Parts)
	}
	for _, bad := range []string{"report", "=sh", "a b=sh", "x=sh,x=sh"} {
		var args []string
		for _, spec := range strings.Split(bad, ",") {
			args = append(args, "--lambda", spec)
		}
		cmd := localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		if _, err := got.options(nil); err == nil {
			t.Errorf("--lambda %s accepted", bad)
		}
	}
}

// `local --ecs` registers local commands for task definition families: the
// stack's ecs executor, allowed on the named clusters.
func TestLocalECS(t *testing.T) {
	t.Parallel()
	var got localFlags
	cmd := localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
	cmd.SetArgs([]string{"--ecs", "etl=runledger task run -- python3 etl.py", "--ecs", "report=./report.sh", "--ecs-cluster", "batch"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	opts, err := got.options(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Parts) != 1 || opts.Parts[0].Name != "ecs" || len(opts.Parts[0].Executors) != 1 || opts.Parts[0].Executors[0].Type() != "ecs" ||
		!slices.Equal(opts.Parts[0].Allowed.ECSTaskDefinitions, []string{"etl", "report"}) || !slices.Equal(opts.Parts[0].Allowed.ECSClusters, []string{"batch"}) {
		t.Errorf("parts = %+v", opts.Parts)
	}
	for _, args := range [][]string{{"--ecs", "etl"}, {"--ecs", "=cmd"}, {"--ecs", "a=x", "--ecs", "a=y"}, {"--ecs-cluster", "batch"}} {
		cmd := localCmd(func(_ context.Context, _ io.Writer, f localFlags) error { got = f; return nil })
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		var usage *usageError
		if _, err := got.options(nil); !errors.As(err, &usage) {
			t.Errorf("%q: error %v, want a usage error", args, err)
		}
	}
}

// A diamond is drawn as a tree under each task's deepest upstream task,
// naming the other upstream tasks.
func TestDAGLines(t *testing.T) {
	t.Parallel()
	tasks := []client.Task{
		{Task: "extract"},
		{Task: "clean", DependsOn: []string{"extract"}},
		{Task: "enrich", DependsOn: []string{"clean"}},
		{Task: "load", DependsOn: []string{"extract", "enrich"}},
		{Task: "audit", DependsOn: []string{"extract"}},
		{Task: "other"},
	}
	var got []string
	for _, l := range dagLines(tasks) {
		got = append(got, l.prefix+l.task.Task+l.note)
	}
	want := []string{
		"extract",
		"├─ clean",
		"│  └─ enrich",
		"│     └─ load (also after extract)",
		"└─ audit",
		"other",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// worker exec takes each endpoint from its flag, else the environment,
// else the local stack's file.
func TestWorkerEndpoints(t *testing.T) {
	for _, k := range []string{"RUNLEDGER_API_URL", "RUNLEDGER_POOL_QUEUE_URL", "RUNLEDGER_EVENTS_QUEUE_URL"} {
		t.Setenv(k, "")
	}
	info := filepath.Join(t.TempDir(), "local.json")
	if err := localinfo.Write(info, localinfo.Info{APIURL: "http://127.0.0.1:1", SQSEndpoint: "http://127.0.0.1:2", Region: "eu-west-1",
		Queues: map[string]string{"shell": "http://q/shell", "events": "http://q/events"}}); err != nil {
		t.Fatal(err)
	}
	f := workerExecFlags{pool: "shell", info: info, eventsURL: "http://flag/events"}
	t.Setenv("RUNLEDGER_POOL_QUEUE_URL", "http://env/shell")
	e, err := f.resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := workerEndpoints{apiURL: "http://127.0.0.1:1", poolQueue: "http://env/shell", eventsQueue: "http://flag/events",
		sqsEndpoint: "http://127.0.0.1:2", region: "eu-west-1"}
	if e != want {
		t.Errorf("endpoints %+v, want %+v", e, want)
	}
	f = workerExecFlags{pool: "shell", info: filepath.Join(t.TempDir(), "missing.json")}
	if _, err := f.resolve(); err == nil {
		t.Error("a missing --info file was accepted")
	}
}

// A follow flag that cannot work is refused before the command writes:
// `--wait --interval 0s` starts no run and no backfill (the API is not
// called at all), and exits 2.
func TestFollowFlagsCheckedBeforeWriting(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, `{"code":"internal","message":"not expected."}`, http.StatusInternalServerError)
	}))
	defer api.Close()
	target := []string{"--api-url", api.URL, "--api-key", "k"}
	for _, args := range [][]string{
		{"jobs", "trigger", "j", "--wait", "--interval", "0s"},
		{"jobs", "backfill", "j", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z", "--wait", "--interval", "0s"},
		{"runs", "watch", "01JH2Z3ZKX8Q6S1M4T7V9W0ABC", "--interval", "-1s"},
	} {
		code, _, stderr := runCLI(t, append(args, target...)...)
		if code != exitUsage || !strings.Contains(stderr, "--interval") {
			t.Errorf("%q: exit %d, stderr %q; want 2 naming --interval", args, code, stderr)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the API was called %d times; a refused flag must write nothing", n)
	}
}

// The API key goes over plain http to the loopback only unless --insecure
// says otherwise: 0.0.0.0 is not a loopback name (and reaches this
// machine's loopback listener on Linux and macOS alike, so --insecure gets
// its answer).
func TestInsecureNeededForTheKeyOverPlainHTTP(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jobs":[]}`)
	}))
	defer api.Close()
	remote := strings.Replace(api.URL, "127.0.0.1", "0.0.0.0", 1)
	code, _, stderr := runCLI(t, "jobs", "list", "--api-url", remote, "--api-key", "k")
	if code != exitFailure || !strings.Contains(stderr, "--insecure") || calls.Load() != 0 {
		t.Errorf("plain http to %s: exit %d, stderr %q, %d calls; want 1 naming --insecure and no call", remote, code, stderr, calls.Load())
	}
	if code, _, stderr := runCLI(t, "jobs", "list", "--api-url", remote, "--api-key", "k", "--insecure"); code != 0 || calls.Load() != 1 {
		t.Errorf("with --insecure: exit %d, stderr %q, %d calls; want 0 and one call", code, stderr, calls.Load())
	}
	if code, _, stderr := runCLI(t, "jobs", "list", "--api-url", api.URL, "--api-key", "k"); code != 0 {
		t.Errorf("loopback: exit %d, stderr %q", code, stderr)
	}
}
