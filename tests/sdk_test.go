package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/localinfo"
)

// runSDKSuite runs one language SDK's own test suite (sdk/<lang>) against
// a local stack started for it, as a developer runs it against `make run`:
// the suite finds the stack by the file `make run` writes
// (.runledger/local.json), here written into a fresh folder and named by
// RUNLEDGER_LOCAL. name and args are the suite's command, run in dir; the
// test fails with the suite's output when the suite does.
func runSDKSuite(t *testing.T, s *stack, dir string, within time.Duration, name string, args ...string) {
	t.Helper()
	info := filepath.Join(t.TempDir(), localinfo.DefaultPath)
	if err := localinfo.Write(info, s.Info); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUNLEDGER_LOCAL="+info)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %q in %s: %v\n%s", name, args, dir, err, out.String())
	}
	t.Logf("%s %q:\n%s", name, args, out.String())
}
