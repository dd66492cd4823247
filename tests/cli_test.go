package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
)

// The CLI's end-to-end tests build the runledger binary and run it as a
// subprocess against a local stack, as a user does.

// cliBinary builds cmd/runledger into the test's temporary folder (the
// build cache makes every build after the first a link).
func cliBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runledger")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/runledger").CombinedOutput()
	if err != nil {
		t.Fatalf("build the CLI: %v\n%s", err, out)
	}
	return bin
}

// cli is the CLI pointed at one stack.
type cli struct {
	t   *testing.T
	bin string
	s   *stack
	dir string // the working directory: no .runledger/local.json in it
}

func newCLI(t *testing.T, s *stack) *cli {
	return &cli{t: t, bin: cliBinary(t), s: s, dir: t.TempDir()}
}

type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func (c *cli) env() []string {
	return append(os.Environ(), "RUNLEDGER_API_URL="+c.s.url, "RUNLEDGER_API_KEY="+c.s.key, "AWS_REGION="+c.s.Info.Region)
}

// run runs the CLI to its end (at most two minutes).
func (c *cli) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir, cmd.Env = c.dir, c.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("runledger %q: %v", args, err)
	}
	return r
}

// must runs the CLI and fails the test unless it exits with code.
func (c *cli) must(t *testing.T, code int, args ...string) cliResult {
	t.Helper()
	r := c.run(t, args...)
	if r.code != code {
		t.Fatalf("runledger %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	return r
}

// startExecWorker runs `runledger worker exec` on pool until the test
// ends, and answers its log.
func (c *cli) startExecWorker(pool string, args ...string) *syncBuffer {
	c.t.Helper()
	i := c.s.Info
	full := append([]string{"worker", "exec", "--pool", pool, "--api-url", c.s.url,
		"--queue-url", i.Queues[pool], "--events-queue-url", i.Queues["events"], "--sqs-endpoint", i.SQSEndpoint,
		"--kill-grace", "2s"}, args...)
	cmd := exec.Command(c.bin, full...)
	cmd.Dir, cmd.Env = c.dir, c.env()
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			c.t.Error("the exec worker did not stop within a minute of SIGTERM")
		}
		if c.t.Failed() || os.Getenv("RUNLEDGER_E2E_LOG") != "" {
			c.t.Logf("exec worker log:\n%s", logs.String())
		}
	})
	return logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// planLine finds the line of the apply diff for a job.
// It answers the mark and the action ("+ create") and the whole line.
func planLine(out, job string) (string, string) {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == job {
			return f[0] + " " + f[1], strings.Join(f, " ")
		}
	}
	return "", ""
}

func TestCLIApplyDiffAndPrune(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{})
	c := newCLI(t, s)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), `# the first job
name: cli-a
pool: demo
payload: {sleep: 10ms}
schedule: {cron: "0 3 * * *", timezone: Europe/Paris}
`)
	writeFile(t, filepath.Join(dir, "b.json"), `{"name": "cli-b", "pool": "demo"}`)

	r := c.must(t, 0, "apply", "-f", dir, "--dry-run")
	mustContain(t, "dry run", r.stdout, "dry run: nothing written")
	if l, _ := planLine(r.stdout, "cli-a"); l != "+ create" {
		t.Errorf("cli-a line %q, want a create\n%s", l, r.stdout)
	}
	s.call("GET", "/v1/jobs/cli-a", nil).must(t, http.StatusNotFound)

	r = c.must(t, 0, "apply", "-f", dir)
	mustContain(t, "apply", r.stdout, "2 to create")
	s.call("GET", "/v1/jobs/cli-a", nil).must(t, http.StatusOK)
	s.call("GET", "/v1/jobs/cli-b", nil).must(t, http.StatusOK)

	// Change a, add c, drop b: update, create and (with --prune) delete.
	writeFile(t, filepath.Join(dir, "a.yaml"), `name: cli-a
pool: demo
payload: {sleep: 20ms}
schedule: {cron: "0 3 * * *", timezone: Europe/Paris}
`)
	writeFile(t, filepath.Join(dir, "c.yml"), "name: cli-c\npool: demo\ntasks:\n  - id: extract\n  - id: load\n    depends_on: [extract]\n")
	if err := os.Remove(filepath.Join(dir, "b.json")); err != nil {
		t.Fatal(err)
	}
	// Deleting one of the two jobs is more than a third of them: --prune
	// waits for --yes, writes nothing meanwhile, and --dry-run shows the plan.
	r = c.must(t, 1, "apply", "-f", dir, "--prune")
	mustContain(t, "unconfirmed prune", r.stderr, "would delete 1 of the 2 jobs", "--yes", "nothing was written")
	s.call("GET", "/v1/jobs/cli-b", nil).must(t, http.StatusOK)
	s.call("GET", "/v1/jobs/cli-c", nil).must(t, http.StatusNotFound)
	r = c.must(t, 0, "apply", "-f", dir, "--prune", "--dry-run")
	if l, _ := planLine(r.stdout, "cli-b"); l != "- delete" {
		t.Errorf("dry run of the prune: cli-b line %q, want a delete\n%s", l, r.stdout)
	}
	r = c.must(t, 0, "apply", "-f", dir, "--prune", "--yes")
	for job, want := range map[string]string{"cli-a": "~ update", "cli-b": "- delete", "cli-c": "+ create"} {
		if l, _ := planLine(r.stdout, job); l != want {
			t.Errorf("%s line %q, want %q\n%s", job, l, want, r.stdout)
		}
	}
	_, line := planLine(r.stdout, "cli-a")
	mustContain(t, "update line", line, "changes payload")
	s.call("GET", "/v1/jobs/cli-b", nil).must(t, http.StatusNotFound)
	a := s.call("GET", "/v1/jobs/cli-a", nil).must(t, http.StatusOK).Body["job"].(map[string]any)
	if a["version"].(float64) != 2 || a["payload"].(map[string]any)["sleep"] != "20ms" {
		t.Errorf("cli-a after the update: %v", a)
	}

	// Nothing changed: nothing written.
	r = c.must(t, 0, "apply", "-f", dir, "--prune", "-o", "json")
	mustContain(t, "second apply", r.stdout, `"action": "unchanged"`)
	if strings.Contains(r.stdout, `"create"`) || strings.Contains(r.stdout, `"update"`) || strings.Contains(r.stdout, `"delete"`) {
		t.Errorf("a second apply changes something:\n%s", r.stdout)
	}

	// Files that hold no definition (only comments) never prune: that
	// would delete every job.
	empty := t.TempDir()
	writeFile(t, filepath.Join(empty, "none.yaml"), "# name: cli-a\n# pool: demo\n")
	for _, extra := range [][]string{nil, {"--yes"}, {"--dry-run"}} {
		r = c.must(t, 1, append([]string{"apply", "-f", empty, "--prune"}, extra...)...)
		mustContain(t, "prune of nothing", r.stderr, "no job definition", "nothing was written")
	}
	s.call("GET", "/v1/jobs/cli-a", nil).must(t, http.StatusOK)
	s.call("GET", "/v1/jobs/cli-c", nil).must(t, http.StatusOK)

	// An invalid file stops everything before any write, naming the file,
	// the field and the code.
	writeFile(t, filepath.Join(dir, "d.yaml"), "name: cli-d\npool: demo\n")
	writeFile(t, filepath.Join(dir, "e.yaml"), "name: cli-e\npool: demo\nschedule: {cron: \"61 * * * *\"}\n")
	r = c.must(t, 1, "apply", "-f", dir)
	mustContain(t, "stderr", r.stderr, "e.yaml", "schedule.cron", "invalid_cron", "nothing was written")
	s.call("GET", "/v1/jobs/cli-d", nil).must(t, http.StatusNotFound)

	// What only the deployment knows (its pools) is checked by the API's
	// dry run, still before anything is written.
	if err := os.Remove(filepath.Join(dir, "e.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "f.yaml"), "name: cli-f\npool: nope\n")
	r = c.must(t, 1, "apply", "-f", dir)
	mustContain(t, "stderr", r.stderr, "f.yaml: invalid_field:", "pool", "nothing was written")
	s.call("GET", "/v1/jobs/cli-d", nil).must(t, http.StatusNotFound)

	// The dry run answers the definition as it would be stored and writes
	// nothing.
	v := s.call("POST", "/v1/jobs?dry_run=true", map[string]any{"name": "cli-g", "pool": "demo"}).must(t, http.StatusOK)
	if job, _ := v.Body["job"].(map[string]any); job["name"] != "cli-g" || job["overlap"] != "allow" {
		t.Errorf("dry run answered %s", v.Raw)
	}
	s.call("GET", "/v1/jobs/cli-g", nil).must(t, http.StatusNotFound)
	s.call("POST", "/v1/jobs?dry_run=maybe", map[string]any{"name": "cli-g", "pool": "demo"}).must(t, http.StatusUnprocessableEntity)
}

func TestCLITriggerWaitAndShow(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{DemoWorker: true})
	c := newCLI(t, s)
	s.createJob(map[string]any{"name": "ok", "pool": "demo", "payload": map[string]any{"sleep": "100ms"},
		"tasks": []any{map[string]any{"id": "extract"}, map[string]any{"id": "load", "depends_on": []string{"extract"}}}})
	s.createJob(map[string]any{"name": "bad", "pool": "demo", "payload": map[string]any{"fail": true, "permanent": true}})

	r := c.must(t, 0, "jobs", "trigger", "ok", "--wait", "--interval", "100ms")
	mustContain(t, "trigger --wait ok", r.stdout, "following run", "-> SUCCEEDED", "SUCCEEDED after")
	runID := strings.Fields(strings.TrimPrefix(r.stdout[strings.Index(r.stdout, "following run "):], "following run "))[0]

	show := c.must(t, 0, "runs", "show", runID)
	mustContain(t, "runs show", show.stdout, "job ok  SUCCEEDED", "DEP WAIT", "QUEUE WAIT", "RUN TIME", "└─ load")

	r = c.must(t, 1, "jobs", "trigger", "bad", "--wait", "--interval", "100ms")
	mustContain(t, "trigger --wait bad", r.stdout, "FAILED  attempt", "demo_failure")

	list := c.must(t, 0, "runs", "list", "--job", "bad", "-o", "json")
	mustContain(t, "runs list", list.stdout, `"status": "FAILED"`)

	// Errors carry the server's code and sentence.
	r = c.must(t, 1, "jobs", "get", "nope")
	mustContain(t, "jobs get nope", r.stderr, "not_found")
}

// execJob creates a job on the exec pool that runs command.
func execJob(s *stack, name string, payload map[string]any, extra map[string]any) {
	def := map[string]any{"name": name, "pool": "shell", "payload": payload}
	for k, v := range extra {
		def[k] = v
	}
	s.createJob(def)
}

func TestCLIExecWorker(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Options{Pools: []string{"default", "shell", "shell-user"}})
	c := newCLI(t, s)
	logs := c.startExecWorker("shell", "--allow", "sh", "--concurrency", "4",
		"--allow-env", "OUT", "--allow-env", "REGION", "--allow-env", "PIDS")
	dir := t.TempDir()
	fast := map[string]any{"max_attempts": 3, "initial_interval": "1s", "backoff_coefficient": 1.0}

	t.Run("succeeds with the run's templates and environment", func(t *testing.T) {
		out := filepath.Join(dir, "ok.txt")
		execJob(s, "sh-ok", map[string]any{
			"command": []string{"sh", "-c", `echo "day={{.LogicalDate}} job={{.Job}} region=$REGION run=$RUNLEDGER_RUN attempt=$RUNLEDGER_ATTEMPT" > "$OUT"`},
			"env":     map[string]string{"OUT": out, "REGION": "{{.Params.region}}"},
		}, nil)
		r := c.must(t, 0, "jobs", "trigger", "sh-ok", "--param", "region=eu", "--logical-time", "2026-01-02T03:00:00Z", "--wait", "--interval", "100ms")
		runID := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want := "day=2026-01-02 job=sh-ok region=eu run=" + runID + " attempt=1\n"; string(got) != want {
			t.Errorf("the command wrote %q, want %q", got, want)
		}
	})

	t.Run("fails, is retried, then succeeds", func(t *testing.T) {
		execJob(s, "sh-retry", map[string]any{
			"command": []string{"sh", "-c", `echo "attempt $RUNLEDGER_ATTEMPT failing" >&2; [ "$RUNLEDGER_ATTEMPT" -ge 2 ] || exit 3`},
		}, map[string]any{"retry": fast})
		r := c.must(t, 0, "jobs", "trigger", "sh-retry", "--wait", "--interval", "100ms")
		// The first attempt's end is printed whether the follower read the
		// task while it was UP_FOR_RETRY or only after the retry began.
		if !regexp.MustCompile(`(UP_FOR_RETRY|FAILED)  attempt 1  \(exit 3 command_failed\)`).MatchString(r.stdout) {
			t.Errorf("trigger --wait does not say how attempt 1 ended:\n%s", r.stdout)
		}
		mustContain(t, "trigger --wait", r.stdout, "attempt 2")
		id := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		task := s.run(id).task("main")
		if len(task.Attempts) != 2 || task.Attempts[0].ExitCode == nil || *task.Attempts[0].ExitCode != 3 ||
			task.Attempts[0].ErrorCategory == nil || *task.Attempts[0].ErrorCategory != "command_failed" || task.State != "SUCCEEDED" {
			t.Errorf("task after the retry: %+v", task)
		}
		// The failed attempt's stderr is its reason in the history.
		reasons := ""
		for _, tr := range s.history(id, "main") {
			reasons += tr.To + ": " + tr.Reason + "\n"
		}
		mustContain(t, "the history's reasons", reasons, "UP_FOR_RETRY: attempt 1 failing")
		// The command's output is in the worker's log, with its attempt.
		mustContain(t, "the worker's log", logs.String(),
			fmt.Sprintf(`"run_id":%q,"task_id":"main","attempt":1,"stream":"stderr","line":"attempt 1 failing"`, id))
	})

	t.Run("a permanent exit code is not retried", func(t *testing.T) {
		execJob(s, "sh-perm", map[string]any{"command": []string{"sh", "-c", "exit 2"}, "permanent_exit_codes": []int{2}},
			map[string]any{"retry": fast})
		r := c.must(t, 1, "jobs", "trigger", "sh-perm", "--wait", "--interval", "100ms")
		// "-> FAILED" only when a poll saw the task before it failed.
		mustContain(t, "trigger --wait", r.stdout, "FAILED  attempt 1", "exit 2 command_failed")
		id := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		if task := s.run(id).task("main"); len(task.Attempts) != 1 {
			t.Errorf("%d attempts, want 1", len(task.Attempts))
		}
	})

	t.Run("a command the allowlist refuses fails at once", func(t *testing.T) {
		execJob(s, "sh-refused", map[string]any{"command": []string{"env"}}, map[string]any{"retry": fast})
		r := c.must(t, 1, "jobs", "trigger", "sh-refused", "--wait", "--interval", "100ms")
		mustContain(t, "trigger --wait", r.stdout, "FAILED  attempt 1", "command_not_allowed")
		id := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		if task := s.run(id).task("main"); len(task.Attempts) != 1 {
			t.Errorf("%d attempts, want 1", len(task.Attempts))
		}
	})

	t.Run("a payload env the worker does not admit fails at once, nothing run", func(t *testing.T) {
		ran := filepath.Join(dir, "bash_env_ran")
		execJob(s, "sh-env-refused", map[string]any{
			"command": []string{"sh", "-c", "touch " + ran},
			"env":     map[string]string{"BASH_ENV": "$(touch " + ran + ")"},
		}, map[string]any{"retry": fast})
		r := c.must(t, 1, "jobs", "trigger", "sh-env-refused", "--wait", "--interval", "100ms")
		mustContain(t, "trigger --wait", r.stdout, "FAILED  attempt 1", "invalid_payload")
		id := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		if task := s.run(id).task("main"); len(task.Attempts) != 1 {
			t.Errorf("%d attempts, want 1", len(task.Attempts))
		}
		if _, err := os.Stat(ran); err == nil {
			t.Error("the refused payload ran")
		}
	})

	t.Run("a command cannot read the worker's secrets", func(t *testing.T) {
		// Root reads any process's /proc: a worker running as root runs the
		// command as another user (the strong form); any other worker runs
		// it as its own user, which the worker, undumpable, refuses.
		pool, cdir := "shell", ""
		if os.Geteuid() == 0 {
			pool, cdir = "shell-user", openTempDir(t)
			c.startExecWorker(pool, "--name", "exec-as-user", "--allow", "sh", "--user", "65534:65534", "--allow-dir", cdir)
		}
		s.createJob(map[string]any{"name": "sh-secrets", "pool": pool, "retry": map[string]any{"max_attempts": 1}, "payload": map[string]any{
			"command": []string{"sh", "-c", `tr '\0' '\n' </proc/$PPID/environ >&2; exit 1`}, "dir": cdir,
		}})
		r := c.must(t, 1, "jobs", "trigger", "sh-secrets", "--wait", "--interval", "100ms")
		id := strings.Fields(r.stdout[strings.Index(r.stdout, "following run ")+len("following run "):])[0]
		reasons := ""
		for _, tr := range s.history(id, "main") {
			reasons += tr.To + ": " + tr.Reason + "\n"
		}
		// Not printed: the worker's environment is the test's.
		if strings.Contains(reasons, s.key) || strings.Contains(reasons, "RUNLEDGER_API_KEY") {
			t.Fatal("the command read the worker's environment: its API key is in the attempt's reason")
		}
		mustContain(t, "the history's reasons", reasons, "environ: Permission denied")
	})

	t.Run("cancelled mid-run, the process is gone", func(t *testing.T) {
		pidFile := filepath.Join(dir, "cancel.pid")
		execJob(s, "sh-cancel", map[string]any{
			"command": []string{"sh", "-c", `echo $$ > "$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS" && exec sleep 300`},
			"env":     map[string]string{"PIDS": pidFile},
		}, map[string]any{"timeouts": map[string]any{"heartbeat": "15s"}})
		r := c.must(t, 0, "jobs", "trigger", "sh-cancel", "-o", "json")
		id := jsonField(t, r.stdout, "run", "id")
		var pid int
		eventually(t, time.Minute, "the command writes its pid", func() (bool, string) {
			b, err := os.ReadFile(pidFile)
			if err != nil {
				return false, err.Error()
			}
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err == nil, string(b)
		})
		c.must(t, 0, "runs", "cancel", id, "--reason", "test")
		w := c.must(t, 1, "runs", "watch", id, "--interval", "100ms", "--timeout", "90s")
		mustContain(t, "runs watch", w.stdout, "CANCELLED")
		eventually(t, 30*time.Second, fmt.Sprintf("process %d is gone", pid), func() (bool, string) {
			err := syscall.Kill(pid, 0)
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return errors.Is(err, syscall.ESRCH) || isZombie(string(stat)), string(stat)
		})
	})
}

// openTempDir is a temporary directory every user may enter and read,
// for a command that runs as another user.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "runledger-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jsonField reads a string at path in a JSON document.
func jsonField(t *testing.T, doc string, path ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("no %q in %s", k, doc)
		}
		v = m[k]
	}
	s, ok := v.(string)
	if !ok {
		t.Fatalf("%v is not a string in %s", path, doc)
	}
	return s
}

// isZombie reads the state of /proc/<pid>/stat: an ended process its new
// parent has not reaped yet.
func isZombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && strings.HasPrefix(stat[i+1:], " Z")
}
