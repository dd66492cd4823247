package execworker_test

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/worker"
)

// workerHelperEnv marks this test binary run again as the worker of
// TestCommandCannotReadWorkerSecrets.
const workerHelperEnv = "EXECWORKER_TEST_WORKER"

// A command cannot read its worker's secrets through /proc: once the
// worker has hidden them, a command of the same user can read neither
// its secret variables nor its /proc/$PPID/environ (the environment it
// started with). The worker is this test binary run again, as another
// user than root when the test runs as root: CAP_SYS_PTRACE reads any
// process's /proc.
func TestCommandCannotReadWorkerSecrets(t *testing.T) {
	// Not parallel: it writes an executable and runs it, and a fork by a
	// parallel test while the file is open for writing makes the exec
	// fail with "text file busy".
	dir := sharedDir(t)
	bin := filepath.Join(dir, "worker.test")
	copyExecutable(t, bin)
	const secret = "aws-secret-4f1c9e"
	cmd := exec.Command(bin, "-test.run=^TestHiddenSecretsWorker$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), workerHelperEnv + "=1", "AWS_SECRET_ACCESS_KEY=" + secret}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestHiddenSecretsWorker") {
		t.Fatalf("the worker: %v\n%s", err, out)
	}
}

// TestHiddenSecretsWorker is the worker of
// TestCommandCannotReadWorkerSecrets: it hides its secrets, then runs a
// command that tries to read them from /proc/$PPID/environ.
func TestHiddenSecretsWorker(t *testing.T) {
	if os.Getenv(workerHelperEnv) == "" {
		t.Skip("the worker process of TestCommandCannotReadWorkerSecrets")
	}
	secret := os.Getenv("AWS_SECRET_ACCESS_KEY")
	if secret == "" {
		t.Fatal("no secret to hide")
	}
	if err := execworker.HideSecrets(); err != nil {
		t.Fatal(err)
	}
	if v, ok := os.LookupEnv("AWS_SECRET_ACCESS_KEY"); ok {
		t.Errorf("AWS_SECRET_ACCESS_KEY=%s is still in the worker's environment", v)
	}
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 0 {
		t.Errorf("PR_GET_DUMPABLE = %d (%v), want 0", d, err)
	}
	h := handlerWith(t, execworker.Config{}, "sh")
	read := payload(t, []string{"sh", "-c", `tr '\0' '\n' </proc/$PPID/environ >&2; exit 1`}, nil, "")
	reason := worker.Reason(h.Handle(context.Background(), task(read)))
	if strings.Contains(reason, secret) {
		t.Errorf("the command read the worker's secret from /proc/$PPID/environ:\n%s", reason)
	}
	if !strings.Contains(reason, "environ") {
		t.Errorf("the command's stderr %q: want the shell's refusal to open /proc/$PPID/environ", reason)
	}
}

// copyExecutable copies this test binary to path, runnable by every user.
func copyExecutable(t *testing.T, path string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
