package tests

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/devstack"
)

// TestPythonSDK runs sdk/python's own unittest suite against a local stack
// started for it: the worker end to end, inputs, retries, cancel, refused
// claims, a stale completion, the client's errors, the Lambda helper, and
// the fenced commit (a partitioned attempt refused after its retry
// started; 100 rounds with random partitions leaving one row each).
func TestPythonSDK(t *testing.T) {
	python := pythonWithBoto3(t)
	s := startStack(t, devstack.Options{})
	runSDKSuite(t, s, "../sdk/python", 15*time.Minute, python, "-m", "unittest", "discover", "-s", "tests", "-v")
}

// pythonWithBoto3 is Debian's python3 (the one python3-boto3 installs
// for), else the python3 on PATH; the test fails, saying what to install,
// when it cannot import boto3.
func pythonWithBoto3(t *testing.T) string {
	t.Helper()
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Fatal("no python3 found: apt-get install python3 python3-boto3")
		}
	}
	if out, err := exec.Command(python, "-c", "import boto3").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import boto3 (%v): apt-get install python3-boto3\n%s", python, err, out)
	}
	return python
}
