package execworker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/localinfo"
	"github.com/runledger/runledger/shared/worker"
)

// otherUser is a uid and gid with no account behind them: commands the
// tests run as another user run as it.
const otherUser = "65534:65534"

func TestLookupUser(t *testing.T) {
	t.Parallel()
	c, err := execworker.LookupUser("1234:5678")
	if err != nil || c.Uid != 1234 || c.Gid != 5678 || len(c.Groups) != 0 {
		t.Errorf("1234:5678: %+v, %v", c, err)
	}
	for _, bad := range []string{"", "x:1", "1:", ":1", "-1:2", "no-such-user-rl", "4294967296:1"} {
		if _, err := execworker.LookupUser(bad); err == nil {
			t.Errorf("user %q accepted", bad)
		}
	}
	if root, err := execworker.LookupUser("0"); err != nil || root.Uid != 0 {
		t.Errorf("uid 0 from the user database: %+v, %v", root, err)
	}
}

// With a user, commands run as it: the local stack's file (the API key,
// only its owner may read it) and the worker's /proc entries are closed
// to them, and the command still writes its output file. Without one, the
// same command reads the file: the test's attack is real.
func TestCommandRunsAsUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only a worker running as root can run commands as another user")
	}
	dir := sharedDir(t)
	if err := localinfo.Write(filepath.Join(dir, localinfo.DefaultPath), localinfo.Info{APIKey: "rl_local_secret"}); err != nil {
		t.Fatal(err)
	}
	dirs, err := execworker.NewDirAllowlist([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	user, err := execworker.LookupUser(otherUser)
	if err != nil {
		t.Fatal(err)
	}
	readFile := `cat "$1" >&2; exit 1`
	readAll := `id -u >&2; cat "$1" >&2; tr '\0' '\n' </proc/$PPID/environ >&2; exit 1`

	asUser := handlerWith(t, execworker.Config{AllowDir: dirs, User: user}, "sh")
	reason := worker.Reason(asUser.Handle(context.Background(), task(payload(t, []string{"sh", "-c", readAll, "sh", localinfo.DefaultPath}, nil, dir))))
	// The reason is not printed: it may hold this test's environment.
	if !strings.HasPrefix(reason, "65534\n") {
		t.Errorf("as user %s, the command's stderr does not start with uid 65534", otherUser)
	}
	if strings.Contains(reason, "rl_local_secret") {
		t.Errorf("as user %s, the command read the local stack's file", otherUser)
	}
	if strings.Contains(reason, "PATH=") || !strings.Contains(reason, "environ: Permission denied") {
		t.Errorf("as user %s, the command read the worker's /proc/<pid>/environ", otherUser)
	}
	asWorker := handlerWith(t, execworker.Config{AllowDir: dirs}, "sh")
	if reason := worker.Reason(asWorker.Handle(context.Background(), task(payload(t, []string{"sh", "-c", readFile, "sh", localinfo.DefaultPath}, nil, dir)))); !strings.Contains(reason, "rl_local_secret") {
		t.Errorf("as the worker's user, the command did not read the local file:\n%s", reason)
	}

	// The output file is the command's: it writes it; an invalid value
	// shows the worker read what it wrote.
	write := payload(t, []string{"sh", "-c", `echo not-json > "$RUNLEDGER_OUTPUT"`}, nil, dir)
	if err := asUser.Handle(context.Background(), task(write)); worker.Category(err) != execworker.CategoryInvalidOutput {
		t.Errorf("writing its output file: err = %v (category %q), want %s", err, worker.Category(err), execworker.CategoryInvalidOutput)
	}
	// A link in its place is not followed: the worker (root) would report
	// a file the command cannot read.
	link := payload(t, []string{"sh", "-c", `rm -f "$RUNLEDGER_OUTPUT" && ln -s "$1" "$RUNLEDGER_OUTPUT"`, "sh", filepath.Join(dir, localinfo.DefaultPath)}, nil, dir)
	if err := asUser.Handle(context.Background(), task(link)); worker.Category(err) != execworker.CategoryInvalidOutput || strings.Contains(err.Error(), "rl_local_secret") {
		t.Errorf("a link as the output file: err = %v (category %q), want %s", err, worker.Category(err), execworker.CategoryInvalidOutput)
	}
}

// A user is for a worker running as root, and must be another than root.
func TestUserRefused(t *testing.T) {
	t.Parallel()
	user, err := execworker.LookupUser(otherUser)
	if err != nil {
		t.Fatal(err)
	}
	allow := mustAllow(t, "sh")
	_, err = execworker.New(execworker.Config{Allow: allow, User: user})
	if os.Geteuid() != 0 && (err == nil || !strings.Contains(err.Error(), "root")) {
		t.Errorf("a user for a worker that is not root: err = %v, want a refusal", err)
	}
	_, err = execworker.New(execworker.Config{Allow: allow, User: &syscall.Credential{}})
	if err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("root as the commands' user: err = %v, want a refusal", err)
	}
}
