package execworker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/worker"
)

func task(payload string) worker.Task {
	return worker.Task{
		Job: "etl", Run: "r1", Task: "load", Attempt: 2, Token: "tk_1",
		LogicalTime: time.Date(2026, 3, 4, 23, 30, 0, 0, time.FixedZone("X", -2*3600)),
		Payload:     []byte(payload), Params: []byte(`{"region": "eu", "n": 12345678901234567890}`),
		Log: slog.New(slog.DiscardHandler),
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	v, err := execworker.VarsOf(task(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := execworker.ParsePayload([]byte(`{"command": ["etl", "--day", "{{.LogicalDate}}", "--at={{.LogicalTime}}",
		"{{.Job}}/{{.Run}}/{{.Task}}#{{.Attempt}}", "{{.Params.region}}", "{{.Params.n}}"],
		"env": {"REGION": "{{.Params.region}}"}, "dir": "/tmp/{{.Job}}"}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Render(v)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"etl", "--day", "2026-03-05", "--at=2026-03-05T01:30:00.000Z", "etl/r1/load#2", "eu", "12345678901234567890"}
	if fmt.Sprint(c.Args) != fmt.Sprint(want) {
		t.Errorf("args = %q, want %q", c.Args, want)
	}
	if fmt.Sprint(c.Env) != "[REGION=eu]" || c.Dir != "/tmp/etl" {
		t.Errorf("env %q, dir %q", c.Env, c.Dir)
	}
	p.Command = []string{"etl", "{{.Params.missing}}"}
	if _, err := p.Render(v); err == nil || !strings.Contains(err.Error(), "command[1]") {
		t.Errorf("missing param: err = %v, want one naming command[1]", err)
	}
}

func TestParsePayloadRefuses(t *testing.T) {
	t.Parallel()
	for name, raw := range map[string]string{
		"no payload":     ``,
		"empty command":  `{"command": []}`,
		"unknown field":  `{"command": ["true"], "permanent_exit_code": [2]}`,
		"reserved env":   `{"command": ["true"], "env": {"RUNLEDGER_RUN": "x"}}`,
		"bad env name":   `{"command": ["true"], "env": {"A=B": "x"}}`,
		"not an object":  `["true"]`,
		"command string": `{"command": "true"}`,
	} {
		if _, err := execworker.ParsePayload([]byte(raw)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestAllowlist(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "sh")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	shPath, _ := filepath.Abs(mustLook(t, "sh"))
	cases := []struct {
		allow []string
		any   bool
		args0 string
		dir   string
		want  error // nil: allowed
	}{
		{[]string{"sh"}, false, "sh", "", nil},
		{[]string{"s*"}, false, "sh", "", nil},
		{[]string{"sh"}, false, fake, "", execworker.ErrNotAllowed},       // a bare name never admits a path
		{[]string{"sh"}, false, "./sh", dir, execworker.ErrNotAllowed},    // nor a relative one
		{[]string{dir + "/*"}, false, "./sh", dir, nil},                   // a path pattern does
		{[]string{dir + "/*"}, false, "sh", "", execworker.ErrNotAllowed}, // sh from PATH is elsewhere
		{[]string{filepath.Dir(shPath) + "/*"}, false, "sh", "", nil},
		{[]string{"python3"}, false, "sh", "", execworker.ErrNotAllowed},
		{nil, true, fake, "", nil},
		{[]string{"no-such-cmd-rl"}, false, "no-such-cmd-rl", "", execworker.ErrCommandNotFound},
	}
	for _, c := range cases {
		a, err := execworker.NewAllowlist(c.allow, c.any)
		if err != nil {
			t.Fatal(err)
		}
		cmd := execworker.Command{Args: []string{c.args0}, Dir: c.dir}
		err = a.Resolve(&cmd)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("allow %q any=%v, run %q in %q: err = %v, want %v", c.allow, c.any, c.args0, c.dir, err, c.want)
		}
	}
	if _, err := execworker.NewAllowlist(nil, false); err == nil {
		t.Error("an empty allowlist without --allow-any was accepted")
	}
	if _, err := execworker.NewAllowlist([]string{"["}, false); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

func mustLook(t *testing.T, name string) string {
	t.Helper()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not in PATH", name)
	return ""
}

// sharedDir is a temporary directory every user may enter and read, for a
// command that runs as another user.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "execworker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return resolved
}

// handler runs the executables allow admits, with the payload variables
// these tests set (R, PIDS).
func handler(t *testing.T, grace time.Duration, allow ...string) *execworker.Handler {
	t.Helper()
	return handlerWith(t, execworker.Config{KillGrace: grace, AllowEnv: allowEnv(t, "R", "PIDS")}, allow...)
}

// handlerWith is New(cfg) with the allowlist allow and, unless cfg has
// one, an environment of the worker's PATH alone.
func handlerWith(t *testing.T, cfg execworker.Config, allow ...string) *execworker.Handler {
	t.Helper()
	a, err := execworker.NewAllowlist(allow, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Allow = a
	if cfg.Environ == nil {
		cfg.Environ = []string{"PATH=" + os.Getenv("PATH")}
	}
	h, err := execworker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func allowEnv(t *testing.T, patterns ...string) execworker.EnvAllowlist {
	t.Helper()
	a, err := execworker.NewEnvAllowlist(patterns)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestHandleOutcomes(t *testing.T) {
	t.Parallel()
	h := handler(t, time.Second, "sh")
	cases := []struct {
		name      string
		payload   string
		ok        bool
		code      int
		category  string
		permanent bool
		inErr     string
	}{
		{"environment", `{"command": ["sh", "-c", "test \"$RUNLEDGER_JOB/$RUNLEDGER_RUN/$RUNLEDGER_TASK/$RUNLEDGER_ATTEMPT/$RUNLEDGER_LOGICAL_TIME/$R\" = etl/r1/load/2/2026-03-05T01:30:00.000Z/eu"], "env": {"R": "{{.Params.region}}"}}`, true, 0, "", false, ""},
		{"exit 3 retryable", `{"command": ["sh", "-c", "echo out; echo first >&2; echo last words >&2; exit 3"]}`, false, 3, execworker.CategoryFailed, false, "last words"},
		{"exit 2 permanent", `{"command": ["sh", "-c", "exit 2"], "permanent_exit_codes": [2]}`, false, 2, execworker.CategoryFailed, true, ""},
		{"not allowed", `{"command": ["env"]}`, false, -1, execworker.CategoryNotAllowed, true, "not allowed"},
		{"bad template", `{"command": ["sh", "{{.Nope}}"]}`, false, -1, execworker.CategoryInvalidPayload, true, "command[1]"},
		{"killed", `{"command": ["sh", "-c", "kill -9 $$"]}`, false, -1, execworker.CategoryKilled, false, "killed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := h.Handle(context.Background(), task(c.payload))
			if c.ok {
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				return
			}
			if err == nil {
				t.Fatal("succeeded, want a failure")
			}
			code, hasCode := worker.ExitCode(err)
			if (c.code >= 0) != hasCode || (hasCode && code != c.code) {
				t.Errorf("exit code %d (%v), want %d", code, hasCode, c.code)
			}
			if got := worker.Category(err); got != c.category {
				t.Errorf("category %q, want %q", got, c.category)
			}
			if worker.IsPermanent(err) != c.permanent {
				t.Errorf("permanent = %v, want %v", worker.IsPermanent(err), c.permanent)
			}
			if !strings.Contains(worker.Reason(err), c.inErr) {
				t.Errorf("reason %q does not contain %q", worker.Reason(err), c.inErr)
			}
		})
	}
}

func TestStderrTailIsBounded(t *testing.T) {
	t.Parallel()
	h := handler(t, time.Second, "sh")
	err := h.Handle(context.Background(), task(`{"command": ["sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line $i >&2; i=$((i+1)); done; exit 1"]}`))
	if err == nil {
		t.Fatal("succeeded")
	}
	reason := worker.Reason(err)
	if !strings.HasSuffix(reason, "line 1999") || strings.Contains(reason, "line 1000\n") {
		t.Errorf("reason is not the tail: ...%s", reason[max(0, len(reason)-80):])
	}
	if len(reason) > worker.MaxReasonBytes || len(reason) < worker.MaxReasonBytes-20 {
		t.Errorf("reason is %d bytes, want the last (at most) %d", len(reason), worker.MaxReasonBytes)
	}
}

// A stop ends the whole process group: SIGTERM, then SIGKILL for what
// ignores it, and the handler reports the stop, not an exit status.
func TestStopKillsTheGroup(t *testing.T) {
	t.Parallel()
	for _, trap := range []bool{false, true} {
		cause := errors.New("operator cancel")
		if trap {
			cause = worker.ErrLeaseLost // the SDK's self-fencing ends ctx the same way
		}
		t.Run(fmt.Sprintf("ignores_sigterm=%v", trap), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pids")
			script := `sleep 300 & echo $! > "$PIDS.tmp"; echo $$ >> "$PIDS.tmp"; mv "$PIDS.tmp" "$PIDS"; wait`
			if trap {
				script = `trap "" TERM; ` + script
			}
			h := handler(t, 300*time.Millisecond, "sh")
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- h.Handle(ctx, task(fmt.Sprintf(`{"command": ["sh", "-c", %q], "env": {"PIDS": %q}}`, script, pidFile)))
			}()
			pids := waitPIDs(t, pidFile)
			cancel(cause)
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("handler did not return after its ctx ended")
			}
			if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
				t.Errorf("err = %v, want one wrapping context.Canceled and %v", err, cause)
			}
			for _, pid := range pids {
				waitGone(t, pid)
			}
		})
	}
}

// waitGone polls until pid is gone: no such process, or a zombie left
// for its new parent to reap (the signal ended it; reaping an orphan is
// init's business).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, syscall.ESRCH) || zombie(string(stat)) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d still runs after the stop: %s", pid, stat)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// zombie reads the state field of /proc/<pid>/stat ("pid (comm) S ...").
func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && strings.HasPrefix(stat[i+1:], " Z")
}

func waitPIDs(t *testing.T, file string) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(file); err == nil {
			var pids []int
			for _, f := range strings.Fields(string(b)) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, n)
			}
			return pids
		}
		time.Sleep(10 * time.Millisecond) // polling for the file, not for a state we could be told of
	}
	t.Fatal("the command never wrote its pids")
	return nil
}

// A fixed command runs whatever the payload says, with its templates
// rendered and the payload and params in RUNLEDGER_PAYLOAD and
// RUNLEDGER_PARAMS; its exit status is the attempt's.
func TestFixedCommand(t *testing.T) {
	t.Parallel()
	h := handler(t, time.Second, "sh")
	ok := h.Fixed([]string{"sh", "-c", `test "$1/$RUNLEDGER_PAYLOAD/$RUNLEDGER_PARAMS" = '2026-03-05/{"any": 1}/{"region": "eu", "n": 12345678901234567890}'`, "sh", "{{.LogicalDate}}"})
	if err := ok(context.Background(), task(`{"any": 1}`)); err != nil {
		t.Fatalf("err = %v, want success", err)
	}
	fail := h.Fixed([]string{"sh", "-c", "exit 4"})
	if code, has := worker.ExitCode(fail(context.Background(), task(`{"command": ["true"]}`))); !has || code != 4 {
		t.Fatalf("exit code %d (%v), want 4: the payload's command must not run", code, has)
	}
	if err := h.Fixed([]string{"env"})(context.Background(), task("")); worker.Category(err) != execworker.CategoryNotAllowed {
		t.Fatalf("err = %v, want command_not_allowed", err)
	}
}

// A command gets the attempt's fence in RUNLEDGER_FENCE, as the claim
// answer carried it, to put into its own transaction; without a fence (the
// in-memory ledger) the variable is not set at all, so a script can tell.
func TestCommandGetsTheFence(t *testing.T) {
	t.Parallel()
	h := handler(t, time.Second, "sh")
	fence := worker.Fence{
		Table: "ledger", Key: map[string]string{"pk": "RUN#r1", "sk": "TASK#load"},
		Condition: "#a = :a AND #s IN (:s0, :s1)", Names: map[string]string{"#a": "attempt", "#s": "state"},
		Values: map[string]any{":a": 2, ":s0": "RUNNING", ":s1": "CANCELLING"},
	}
	want, err := json.Marshal(fence)
	if err != nil {
		t.Fatal(err)
	}
	check := `{"command": ["sh", "-c", "test \"${RUNLEDGER_FENCE-unset}\" = \"$R\""], "env": {"R": "{{.Params.want}}"}}`
	cases := []struct {
		name string
		tk   worker.Task
		want string
	}{
		{"with a fence", task(check).WithFence(fence), string(want)},
		{"without", task(check), "unset"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			params, _ := json.Marshal(map[string]string{"want": c.want})
			c.tk.Params = params
			if err := h.Handle(context.Background(), c.tk); err != nil {
				t.Fatalf("the command did not see RUNLEDGER_FENCE=%s: %v", c.want, err)
			}
		})
	}
}
