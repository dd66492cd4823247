package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
)

// TestTypeScriptSDK runs the TypeScript worker SDK's own suite
// (sdk/typescript/test, node --test) against a local stack: a run through
// its worker, inputs, retries, cancel, refused claims, a stale
// completion, the Lambda helpers, the client's errors, and the fenced
// commit on the stack's DynamoDB. The files run one at a time: they share
// the default pool's queue.
func TestTypeScriptSDK(t *testing.T) {
	node := nodeBinary(t)
	files, err := filepath.Glob("../sdk/typescript/test/*.test.js")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in sdk/typescript/test (%v)", err)
	}
	args := []string{"--test", "--test-concurrency=1"}
	for _, f := range files {
		args = append(args, filepath.Join("test", filepath.Base(f)))
	}
	s := startStack(t, devstack.Options{})
	runSDKSuite(t, s, "../sdk/typescript", 10*time.Minute, node, args...)
}

// nodeBinary is the pinned Node 22 the repository installs, else node on
// PATH (make deps installs the first).
func nodeBinary(t *testing.T) string {
	t.Helper()
	if p, err := filepath.Abs("../node_modules/.bin/node"); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("no Node: neither node_modules/.bin/node (make deps) nor node on PATH")
	}
	return p
}
