package lambdarie

import (
	"os"
	"testing"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
)

// The Makefile's test-lambda target sets these: the emulator binary, the
// built functions and the synthesized template.
const (
	envRIE    = "RUNLEDGER_LAMBDA_RIE"
	envDist   = "RUNLEDGER_LAMBDA_DIST"
	envCDKOut = "RUNLEDGER_LAMBDA_CDK_OUT"
)

var env *emulator.Env

// TestMain starts the emulators only when make test-lambda runs the
// package: a plain go test has no binaries to run, and its tests skip.
func TestMain(m *testing.M) {
	if os.Getenv(envRIE) == "" {
		os.Exit(m.Run())
	}
	emulatortest.Main(m, func(e *emulator.Env) error {
		env = e
		return nil
	})
}

// needBinaries skips t outside make test-lambda, and fails it when the
// target's settings are incomplete.
func needBinaries(t *testing.T) (rie, dist, cdkOut string) {
	t.Helper()
	rie = os.Getenv(envRIE)
	if rie == "" {
		t.Skip("runs the built functions under the Lambda runtime emulator: make test-lambda (" + envRIE + " is unset)")
	}
	dist, cdkOut = os.Getenv(envDist), os.Getenv(envCDKOut)
	if dist == "" || cdkOut == "" {
		t.Fatalf("%s is set, so %s and %s must be too (make test-lambda sets all three)", envRIE, envDist, envCDKOut)
	}
	return rie, dist, cdkOut
}
