package execworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/worker"
)

// payload is the JSON of a payload running command with env in dir.
func payload(t *testing.T, command []string, env map[string]string, dir string) string {
	t.Helper()
	b, err := json.Marshal(execworker.Payload{Command: command, Env: env, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// wantInvalid checks err is a permanent invalid_payload naming want.
func wantInvalid(t *testing.T, err error, want string) {
	t.Helper()
	if worker.Category(err) != execworker.CategoryInvalidPayload || !worker.IsPermanent(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v (category %q), want a permanent invalid_payload naming %q", err, worker.Category(err), want)
	}
}

func TestEnvAllowlist(t *testing.T) {
	t.Parallel()
	cases := []struct {
		allow []string
		name  string
		ok    bool
	}{
		{nil, "REGION", false}, // none by default
		{[]string{"REGION"}, "REGION", true},
		{[]string{"REG*"}, "REGION", true},
		{[]string{"*"}, "OUT_FILE", true},
		{[]string{"REGION"}, "ZONE", false},
		// Loader, shell and interpreter names: a glob never admits them.
		{[]string{"*"}, "LD_PRELOAD", false},
		{[]string{"LD_*"}, "LD_LIBRARY_PATH", false},
		{[]string{"*"}, "LD_AUDIT", false},
		{[]string{"*"}, "DYLD_INSERT_LIBRARIES", false},
		{[]string{"BASH_*"}, "BASH_ENV", false},
		{[]string{"*"}, "ENV", false},
		{[]string{"P*"}, "PS4", false},
		{[]string{"*"}, "PROMPT_COMMAND", false},
		{[]string{"*"}, "SHELLOPTS", false},
		{[]string{"*"}, "BASHOPTS", false},
		{[]string{"?FS"}, "IFS", false},
		{[]string{"PAT?"}, "PATH", false},
		{[]string{"PYTHON*"}, "PYTHONPATH", false},
		{[]string{"*"}, "PYTHONSTARTUP", false},
		{[]string{"*"}, "PYTHONHOME", false},
		{[]string{"NODE_*"}, "NODE_OPTIONS", false},
		{[]string{"*"}, "NODE_PATH", false},
		{[]string{"PERL*"}, "PERL5OPT", false},
		{[]string{"*"}, "PERL5LIB", false},
		{[]string{"*"}, "PERLLIB", false},
		{[]string{"RUBY*"}, "RUBYOPT", false},
		{[]string{"*"}, "RUBYLIB", false},
		{[]string{"*"}, "JAVA_TOOL_OPTIONS", false},
		{[]string{"*"}, "_JAVA_OPTIONS", false},
		{[]string{"*"}, "JDK_JAVA_OPTIONS", false},
		{[]string{"GIT_*"}, "GIT_CONFIG_COUNT", false},
		{[]string{"*"}, "GIT_CONFIG_KEY_0", false},
		{[]string{"*"}, "GIT_SSH_COMMAND", false},
		{[]string{"*"}, "GIT_EXEC_PATH", false},
		{[]string{"H*"}, "HOME", false},
		{[]string{"*"}, "TMPDIR", false},
		{[]string{"*"}, "ld_preload", false}, // case does not get around it
		// ...unless named one by one.
		{[]string{"LD_PRELOAD"}, "LD_PRELOAD", true},
		{[]string{"*", "PYTHONPATH"}, "PYTHONPATH", true},
		{[]string{"GIT_CONFIG_COUNT"}, "GIT_CONFIG_KEY_0", false},
		// The worker's own variables, always.
		{[]string{"*"}, "RUNLEDGER_JOB", false},
		{[]string{"RUNLEDGER*"}, "RUNLEDGER_FENCING_TOKEN", false},
	}
	for _, c := range cases {
		a, err := execworker.NewEnvAllowlist(c.allow)
		if err != nil {
			t.Fatalf("%q: %v", c.allow, err)
		}
		if err := a.Check(c.name); (err == nil) != c.ok {
			t.Errorf("allow-env %q, env %s: err = %v, want allowed=%v", c.allow, c.name, err, c.ok)
		}
	}
	var zero execworker.EnvAllowlist
	if zero.Check("REGION") == nil {
		t.Error("the zero EnvAllowlist admits a name")
	}
	for _, bad := range [][]string{{""}, {"["}, {"RUNLEDGER_API_KEY"}} {
		if _, err := execworker.NewEnvAllowlist(bad); err == nil {
			t.Errorf("allow-env %q accepted", bad)
		}
	}
}

// A glob of --allow-env is for data variables: the option and hook
// variables of programs (their startup commands, wrappers, configuration
// files) pass only when named one by one, in any case.
func TestEnvGlobAdmitsDataOnly(t *testing.T) {
	t.Parallel()
	star := allowEnv(t, "*")
	hooks := []string{"TAR_OPTIONS", "RSYNC_RSH", "RSYNC_CONNECT_PROG", "GOFLAGS", "RUSTC_WRAPPER", "CC",
		"DOTNET_STARTUP_HOOKS", "OPENSSL_CONF", "LESSOPEN", "VIMINIT", "KUBECONFIG", "AWS_CONFIG_FILE",
		"GLIBC_TUNABLES", "MAKEFILES", "XDG_DATA_DIRS", "CARGO_BUILD_RUSTC_WRAPPER", "PIP_INDEX_URL"}
	for _, name := range hooks {
		for _, n := range []string{name, strings.ToLower(name)} {
			if err := star.Check(n); err == nil || !strings.Contains(err.Error(), "names it exactly") {
				t.Errorf("allow-env '*', env %s: err = %v, want a refusal asking to name it", n, err)
			}
		}
		if err := allowEnv(t, name).Check(name); err != nil {
			t.Errorf("allow-env %s, env %s: %v", name, name, err)
		}
	}
	for _, data := range []string{"REGION", "ETL_DAY", "out_file", "TARGET_TABLE", "CCY", "GOAL", "LESSON"} {
		if err := star.Check(data); err != nil {
			t.Errorf("allow-env '*', env %s: %v", data, err)
		}
	}
}

// With --allow tar, TAR_OPTIONS would run a command at tar's first
// checkpoint. Refused under a glob; admitted (and the attack then works,
// which shows it is real) only when named exactly.
func TestPayloadEnvTarOptionsRefused(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar is not installed: the TAR_OPTIONS attack needs it")
	}
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tarEnv := map[string]string{"TAR_OPTIONS": "--checkpoint=1 '--checkpoint-action=exec=touch " + pwned + "'"}
	p := task(payload(t, []string{"tar", "-cf", filepath.Join(dir, "out.tar"), "-C", dir, "data"}, tarEnv, ""))
	for _, allow := range [][]string{nil, {"*"}, {"TAR_*"}, {"tar_options"}} {
		h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, allow...)}, "tar")
		wantInvalid(t, h.Handle(context.Background(), p), "TAR_OPTIONS")
		if exists(pwned) {
			t.Fatalf("allow-env %q: the payload's TAR_OPTIONS ran a command", allow)
		}
	}
	h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, "TAR_OPTIONS")}, "tar")
	if err := h.Handle(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if !exists(pwned) {
		t.Error("TAR_OPTIONS named exactly: tar did not run its checkpoint action")
	}
}

// A payload's env cannot make an allowed executable run something else:
// with --allow 'DIR/*.sh', BASH_ENV would run code before the script.
// Refused even under a glob that matches it; admitted (and the attack then
// works, which shows the test's attack is real) only when named exactly.
func TestPayloadEnvBashEnvRefused(t *testing.T) {
	// Not parallel: it writes an executable and runs it, and a fork by a
	// parallel test while the file is open for writing makes the exec
	// fail with "text file busy".
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed: the BASH_ENV attack needs it")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "job.sh")
	if err := os.WriteFile(script, []byte("#!"+bash+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	pwned := filepath.Join(dir, "pwned")
	p := payload(t, []string{script}, map[string]string{"BASH_ENV": "$(touch " + pwned + ")"}, "")
	for _, allow := range [][]string{nil, {"*"}, {"BASH_*"}, {"BASH_EN?"}} {
		h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, allow...)}, dir+"/*.sh")
		wantInvalid(t, h.Handle(context.Background(), task(p)), "BASH_ENV")
		if exists(pwned) {
			t.Fatalf("allow-env %q: the payload's BASH_ENV ran", allow)
		}
	}
	h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, "BASH_ENV")}, dir+"/*.sh")
	if err := h.Handle(context.Background(), task(p)); err != nil {
		t.Fatal(err)
	}
	if !exists(pwned) {
		t.Error("BASH_ENV named exactly: the command did not get it")
	}
}

// With --allow git, GIT_CONFIG_* would define an alias running a shell.
func TestPayloadEnvGitConfigRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	gitEnv := map[string]string{"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "alias.pwn", "GIT_CONFIG_VALUE_0": "!touch " + pwned}

	// Without git: the refusal comes before anything runs, whatever runs.
	ran := filepath.Join(dir, "ran")
	h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, "*")}, "sh")
	wantInvalid(t, h.Handle(context.Background(), task(payload(t, []string{"sh", "-c", "touch " + ran}, gitEnv, ""))), "GIT_CONFIG_")
	if exists(ran) {
		t.Fatal("a payload with GIT_CONFIG_* ran")
	}

	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: skipping the git alias attack itself (the refusal was checked with sh)")
	}
	p := task(payload(t, []string{"git", "pwn"}, gitEnv, ""))
	for _, allow := range [][]string{nil, {"*"}, {"GIT_*"}, {"GIT_CONFIG_COUNT", "GIT_*"}} {
		h := handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, allow...)}, "git")
		wantInvalid(t, h.Handle(context.Background(), p), "GIT_CONFIG_")
		if exists(pwned) {
			t.Fatalf("allow-env %q: the payload's git alias ran", allow)
		}
	}
	h = handlerWith(t, execworker.Config{AllowEnv: allowEnv(t, "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0")}, "git")
	if err := h.Handle(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if !exists(pwned) {
		t.Error("GIT_CONFIG_* named exactly: git did not get them")
	}
}

// dir must be the worker's working directory or under an --allow-dir,
// once symlinks are resolved; a refused dir runs nothing.
func TestPayloadDir(t *testing.T) {
	t.Parallel()
	allowed, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(allowed, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "link")); err != nil {
		t.Fatal(err)
	}
	dirs, err := execworker.NewDirAllowlist([]string{allowed})
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	for dir, ok := range map[string]bool{
		"":                                  true,
		".":                                 true, // the worker's own
		wd:                                  true,
		allowed:                             true,
		filepath.Join(allowed, "sub"):       true,
		outside:                             false,
		filepath.Join(allowed, "link"):      false, // a link out of the allowed folder
		filepath.Join(allowed, "..", "x"):   false,
		filepath.Join(allowed, "missing"):   false,
		filepath.Dir(allowed):               false,
		allowed + "-sibling":                false,
		filepath.Join(allowed, "sub", ".."): true,
	} {
		if _, err := dirs.Resolve(dir); (err == nil) != ok {
			t.Errorf("dir %q: err = %v, want allowed=%v", dir, err, ok)
		}
	}
	if _, err := execworker.NewDirAllowlist([]string{filepath.Join(allowed, "missing")}); err == nil {
		t.Error("a missing --allow-dir was accepted")
	}

	touch := []string{"sh", "-c", "touch ran"}
	h := handlerWith(t, execworker.Config{AllowDir: dirs}, "sh")
	for _, dir := range []string{outside, filepath.Join(allowed, "link")} {
		wantInvalid(t, h.Handle(context.Background(), task(payload(t, touch, nil, dir))), "--allow-dir")
	}
	// By default, only the worker's working directory.
	byDefault := handlerWith(t, execworker.Config{}, "sh")
	wantInvalid(t, byDefault.Handle(context.Background(), task(payload(t, touch, nil, allowed))), "--allow-dir")
	if exists(filepath.Join(outside, "ran")) || exists(filepath.Join(allowed, "ran")) {
		t.Fatal("a command ran in a refused dir")
	}
	if err := h.Handle(context.Background(), task(payload(t, touch, nil, filepath.Join(allowed, "sub")))); err != nil {
		t.Fatal(err)
	}
	if !exists(filepath.Join(allowed, "sub", "ran")) {
		t.Error("the command did not run in the allowed dir")
	}
}

// envOf runs `env` through h and answers the process's environment.
func envOf(t *testing.T, h *execworker.Handler, fixed bool) map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "env")
	argv := []string{"sh", "-c", `env > "$1"`, "sh", out}
	var err error
	if fixed {
		err = h.Fixed(argv)(context.Background(), task(`{"x": 1}`))
	} else {
		err = h.Handle(context.Background(), task(payload(t, argv, nil, "")))
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("tk_1")) {
		t.Errorf("the attempt's token is in the command's environment:\n%s", b)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	return env
}

// A command gets PATH, HOME, LANG, TZ and TMPDIR of the worker's
// environment and what --pass-env names, never the rest (its credentials,
// its API key), and never the attempt's token.
func TestCommandEnvironment(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=" + os.Getenv("PATH"), "HOME=/home/worker", "LANG=C.UTF-8", "TZ=UTC", "TMPDIR=/tmp",
		"AWS_SECRET_ACCESS_KEY=aws-secret", "RUNLEDGER_API_KEY=api-key", "RUNLEDGER_TOKEN=start-secret", "OTHER=x"}
	base := envOf(t, handlerWith(t, execworker.Config{Environ: environ}, "sh"), false)
	for _, k := range []string{"PATH", "HOME", "LANG", "TZ", "TMPDIR", "RUNLEDGER_JOB", "RUNLEDGER_ATTEMPT"} {
		if base[k] == "" {
			t.Errorf("base environment: %s missing", k)
		}
	}
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "RUNLEDGER_API_KEY", "RUNLEDGER_TOKEN", "OTHER", "RUNLEDGER_FENCING_TOKEN"} {
		if v, ok := base[k]; ok {
			t.Errorf("base environment: %s=%s is there", k, v)
		}
	}

	passed := envOf(t, handlerWith(t, execworker.Config{Environ: environ, PassEnv: []string{"AWS_SECRET_ACCESS_KEY", "RUNLEDGER_API_KEY"}}, "sh"), false)
	if passed["AWS_SECRET_ACCESS_KEY"] != "aws-secret" || passed["RUNLEDGER_API_KEY"] != "api-key" {
		t.Errorf("--pass-env: AWS_SECRET_ACCESS_KEY=%q RUNLEDGER_API_KEY=%q", passed["AWS_SECRET_ACCESS_KEY"], passed["RUNLEDGER_API_KEY"])
	}
	if _, ok := passed["OTHER"]; ok {
		t.Error("--pass-env: OTHER is there, not passed")
	}

	// `task run`: the container's environment is the operator's, but its
	// RUNLEDGER_* variables (how it claims) stay with the worker.
	inherited := envOf(t, handlerWith(t, execworker.Config{Environ: environ, InheritEnv: true}, "sh"), true)
	if inherited["OTHER"] != "x" || inherited["RUNLEDGER_PAYLOAD"] != `{"x": 1}` {
		t.Errorf("inherited environment: OTHER=%q RUNLEDGER_PAYLOAD=%q", inherited["OTHER"], inherited["RUNLEDGER_PAYLOAD"])
	}
	for _, k := range []string{"RUNLEDGER_API_KEY", "RUNLEDGER_TOKEN", "RUNLEDGER_FENCING_TOKEN"} {
		if _, ok := inherited[k]; ok {
			t.Errorf("inherited environment: %s is there", k)
		}
	}
	if _, err := execworker.New(execworker.Config{Allow: mustAllow(t, "sh"), PassEnv: []string{"A=B"}}); err == nil {
		t.Error("a --pass-env that is not a name was accepted")
	}
}

func mustAllow(t *testing.T, allow ...string) execworker.Allowlist {
	t.Helper()
	a, err := execworker.NewAllowlist(allow, false)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Rendering is bounded in output and in steps: each field renders to
// MaxFieldBytes at most, checked as it is written.
func TestRenderBounded(t *testing.T) {
	t.Parallel()
	bs := task(`{}`)
	bs.Params = []byte(`{"bs": "` + strings.Repeat(`\\`, 60<<10) + `"}`) // 60 KiB of backslashes
	v, err := execworker.VarsOf(bs)
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		`{{range 100000}}{{printf "%0100000d" 1}}{{end}}`:                                 "128 KiB",
		`{{range 1000}}{{$.Job}}{{end}}{{printf "%0131072d" 1}}`:                          "128 KiB",
		`{{printf "%0999999999d" 1}}`:                                                     "128 KiB",
		`{{printf "%.999999999f" 1.0}}`:                                                   "128 KiB",
		`{{printf "%0100000d%0100000d" 1 2}}`:                                             "128 KiB",
		`{{printf "%*d" 999999999 1}}`:                                                    "(*)",
		`{{range 1000000000}}{{end}}`:                                                     "100000",
		`{{range 100000}}{{range 100000}}{{end}}{{end}}`:                                  "100000",
		`{{define "a"}}{{template "a"}}{{template "a"}}{{end}}{{template "a"}}`:           "one template",
		"{{" + strings.Repeat("js (", 20) + ".Params.bs" + strings.Repeat(")", 20) + "}}": "128 KiB", // each js doubles the backslashes
		`{{print (printf "%0100000d" 1) (printf "%0100000d" 1) (printf "%0100000d" 1) (printf "%0100000d" 1) (printf "%0100000d" 1)}}`: "128 KiB",
		`{{range 6}}{{if printf "%0100000d" 1}}{{end}}{{end}}`:                                                                         "512 KiB",
		`{{template "command[0]"}}`: "one template",
	} {
		p := execworker.Payload{Command: []string{text}}
		if _, err := p.Render(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one saying %q", text, err, want)
		}
	}
	for text, want := range map[string]int{
		`{{printf "%0131072d" 1}}`:                   execworker.MaxFieldBytes,
		`{{range 3}}{{$.Job}}{{end}}`:                9,
		`{{range $i, $c := .Params}}{{$i}}{{end}}`:   len("bs"),
		`{{with .Params.bs}}{{1}}{{else}}{{end}}`:    1,
		`{{printf "%5s|%-4d|%%|%.2f" "a" 7 1.234}}`:  len("    a|7   |%|1.23"),
		`{{html "<a>"}}{{js "'"}}{{urlquery "a b"}}`: len("&lt;a&gt;\\'a+b"),
	} {
		c, err := execworker.Payload{Command: []string{text}}.Render(v)
		if err != nil {
			t.Errorf("%s: %v", text, err)
		} else if len(c.Args[0]) != want {
			t.Errorf("%s: %d bytes, want %d", text, len(c.Args[0]), want)
		}
	}
	h := handler(t, time.Second, "sh")
	ran := filepath.Join(t.TempDir(), "ran")
	big := payload(t, []string{"sh", "-c", "touch " + ran, `{{range 100000}}{{printf "%0100000d" 1}}{{end}}`}, nil, "")
	wantInvalid(t, h.Handle(context.Background(), task(big)), "command[3]")
	if exists(ran) {
		t.Error("a payload over the cap ran")
	}
}

// A payload's fields share one budget: 1 MiB of output and 100,000 range
// steps across its arguments, env values and dir, so many fields each
// under their own cap cannot add up to more.
func TestRenderPayloadBudget(t *testing.T) {
	t.Parallel()
	v, err := execworker.VarsOf(task(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	full := `{{printf "%0131072d" 1}}` // one field's 128 KiB
	many := func(n int, text string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = text
		}
		return out
	}
	for name, c := range map[string]struct {
		p    execworker.Payload
		want string
	}{
		"nine full arguments": {execworker.Payload{Command: append([]string{"sh"}, many(9, full)...)}, "command[8]: renders over 1 MiB with the fields before it"},
		// "sh" counts too: the eighth full field passes 1 MiB.
		"arguments and env": {execworker.Payload{Command: append([]string{"sh"}, many(5, full)...),
			Env: map[string]string{"A": full, "B": full, "C": full, "D": full}}, "env.C: renders over 1 MiB"},
		"two loops": {execworker.Payload{Command: []string{"sh", `{{range 60000}}{{end}}`, `{{range 60000}}{{end}}`}}, "command[2]: range loops more than 100000 times"},
	} {
		if _, err := c.p.Render(v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", name, err, c.want)
		}
	}
	if _, err := (execworker.Payload{Command: append([]string{"sh"}, many(7, full)...)}).Render(v); err != nil {
		t.Errorf("seven full arguments (896 KiB): %v", err)
	}
}

// syncBuffer is a log destination the output readers write concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func loggedTask(p string) (worker.Task, *syncBuffer) {
	logs := &syncBuffer{}
	tk := task(p)
	tk.Log = slog.New(slog.NewJSONHandler(logs, nil))
	return tk, logs
}

// The start of a command logs its path and how many arguments it has,
// not the arguments: they may hold the run's params.
func TestStartLogHidesArguments(t *testing.T) {
	t.Parallel()
	h := handler(t, time.Second, "sh")
	tk, logs := loggedTask(payload(t, []string{"sh", "-c", "exit 0", "sh", "password=hunter2", "{{.Params.region}}-zone"}, nil, ""))
	if err := h.Handle(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	got := logs.String()
	if strings.Contains(got, "hunter2") || strings.Contains(got, "eu-zone") {
		t.Errorf("the log holds the arguments:\n%s", got)
	}
	if !strings.Contains(got, `"msg":"starting command"`) || !strings.Contains(got, `"args":5`) {
		t.Errorf("the log does not say the command starts with 5 arguments:\n%s", got)
	}
}

// An attempt logs at most OutputBurst lines at once; the rest are
// counted, and one line says how many were dropped. The stderr tail (the
// failure's reason) still has the last lines.
func TestOutputLinesCapped(t *testing.T) {
	t.Parallel()
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := handlerWith(t, execworker.Config{OutputBurst: 10, OutputPerSecond: 1, Now: func() time.Time { return frozen }}, "sh")
	tk, logs := loggedTask(payload(t, []string{"sh", "-c", `i=0; while [ $i -lt 50 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done; exit 1`}, nil, ""))
	err := h.Handle(context.Background(), tk)
	if !strings.HasSuffix(worker.Reason(err), "err 49") {
		t.Errorf("reason %q, want the stderr tail", worker.Reason(err))
	}
	got := logs.String()
	if n := strings.Count(got, `"msg":"command output"`); n != 10 {
		t.Errorf("%d output lines logged, want 10", n)
	}
	if !strings.Contains(got, `"msg":"command output lines dropped","dropped":90,"burst":10,"per_second":1`) {
		t.Errorf("no line saying 90 lines were dropped:\n%s", got)
	}

	// Lines come back at OutputPerSecond.
	var mu sync.Mutex
	now := frozen
	ticking := handlerWith(t, execworker.Config{OutputBurst: 1, OutputPerSecond: 1, Now: func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}}, "sh")
	tk, logs = loggedTask(payload(t, []string{"sh", "-c", `i=0; while [ $i -lt 20 ]; do echo out $i; i=$((i+1)); done`}, nil, ""))
	if err := ticking.Handle(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); strings.Count(got, `"msg":"command output"`) != 20 || strings.Contains(got, "dropped") {
		t.Errorf("a line a second over a second each: not all logged\n%s", got)
	}
}

// Path patterns match the executable once its symlinks are resolved: a
// link in an allowed folder to a file elsewhere is refused.
func TestAllowlistResolvesSymlinks(t *testing.T) {
	// Not parallel: it writes an executable and runs it, and a fork by a
	// parallel test while the file is open for writing makes the exec
	// fail with "text file busy".
	allowed, elsewhere, links := t.TempDir(), t.TempDir(), t.TempDir()
	for _, f := range []string{filepath.Join(allowed, "job.sh"), filepath.Join(elsewhere, "evil.sh")} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(elsewhere, "evil.sh"), filepath.Join(allowed, "link.sh")))
	must(os.Symlink(allowed, filepath.Join(links, "dir"))) // a link to the allowed folder
	must(os.Symlink(filepath.Join(allowed, "job.sh"), filepath.Join(links, "job")))
	cases := []struct {
		allow string
		run   string
		want  error
	}{
		{allowed + "/*", filepath.Join(allowed, "job.sh"), nil},
		{allowed + "/*", filepath.Join(allowed, "link.sh"), execworker.ErrNotAllowed},
		{allowed + "/*.sh", filepath.Join(allowed, "link.sh"), execworker.ErrNotAllowed},
		{allowed + "/*", filepath.Join(links, "dir", "job.sh"), nil}, // the file is in the folder
		{allowed + "/*", filepath.Join(links, "dir", "link.sh"), execworker.ErrNotAllowed},
		{filepath.Join(links, "dir") + "/*", filepath.Join(allowed, "job.sh"), nil}, // the pattern's folder is resolved too
		{filepath.Join(links, "job"), filepath.Join(links, "job"), nil},             // a pattern naming one link admits its target
		{links + "/*", filepath.Join(links, "job"), execworker.ErrNotAllowed},       // a glob over links does not
	}
	for _, c := range cases {
		a := mustAllow(t, c.allow)
		cmd := execworker.Command{Args: []string{c.run}}
		err := a.Resolve(&cmd)
		if (c.want == nil) != (err == nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("allow %q, run %q: err = %v, want %v", c.allow, c.run, err, c.want)
		}
		if err == nil && cmd.Path != filepath.Join(allowed, "job.sh") {
			t.Errorf("allow %q, run %q: path %q, want the link's target", c.allow, c.run, cmd.Path)
		}
	}
}
