package emulatortest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/emulator"
)

// helperEnv turns this test binary into a child that starts the emulators
// through Main, prints their pids and then dies the way the mode says.
const helperEnv = "EMULATORTEST_HELPER"

func TestMain(m *testing.M) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		os.Exit(m.Run())
	}
	Main(m, func(env *emulator.Env) error {
		fmt.Printf("pids %d %d\n", env.DynamoDB().PID, env.SQS().PID)
		switch mode {
		case "panic":
			// Like a panicking test: a goroutine's panic ends the process
			// without running Main's deferred Stop.
			go panic("helper panics on purpose")
		case "wait":
			// Until the parent sends a signal.
		}
		select {}
	})
}

// A panic kills the test binary without any deferred cleanup; the
// emulators must still die with it (on Linux the kernel's parent-death
// signal, elsewhere the launchers' watch on their stdin).
func TestPanicLeavesNoEmulator(t *testing.T) {
	t.Parallel()
	out, err := runHelper(t, "panic", nil)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out, "helper panics on purpose") {
		t.Fatalf("helper: err = %v, want exit status 2 from the panic; output:\n%s", err, out)
	}
}

// SIGTERM (and SIGINT) stop the emulators and exit with 128+signal.
func TestSignalStopsEmulators(t *testing.T) {
	t.Parallel()
	out, err := runHelper(t, "wait", func(p *os.Process) error { return p.Signal(syscall.SIGTERM) })
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Fatalf("helper: err = %v, want exit status %d; output:\n%s", err, 128+int(syscall.SIGTERM), out)
	}
}

// runHelper runs this binary as a helper child, applies act once the child
// reports its emulators, waits for the child to end and then requires both
// emulator processes to be gone. It returns the child's stderr and exit.
func runHelper(t *testing.T, mode string, act func(*os.Process) error) (string, error) {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, helperEnv+"="+mode, "AWS_CONFIG_FILE="+empty, "AWS_SHARED_CREDENTIALS_FILE="+empty)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "pids ") {
				lines <- sc.Text()
				break
			}
		}
		close(lines)
	}()
	var dynamoPID, sqsPID int
	select {
	case line, ok := <-lines:
		if !ok {
			cmd.Wait()
			t.Fatalf("helper ended without reporting pids:\n%s", stderr.String())
		}
		if _, err := fmt.Sscanf(line, "pids %d %d", &dynamoPID, &sqsPID); err != nil || dynamoPID <= 0 || sqsPID <= 0 {
			cmd.Process.Kill()
			t.Fatalf("helper reported %q (%v), want two started emulators", line, err)
		}
	case <-time.After(4 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("helper did not report pids within 4 minutes:\n%s", stderr.String())
	}
	t.Cleanup(func() { // never leak, whatever the assertions say
		syscall.Kill(-dynamoPID, syscall.SIGKILL)
		syscall.Kill(-sqsPID, syscall.SIGKILL)
	})

	if act != nil {
		if err := act(cmd.Process); err != nil {
			t.Fatal(err)
		}
	}
	waitErr := cmd.Wait()

	// The orphans die with the helper; give them a moment.
	deadline := time.After(15 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for emulator.Alive(dynamoPID) || emulator.Alive(sqsPID) {
		select {
		case <-deadline:
			t.Fatalf("15s after the helper ended: dynamodb pid %d alive %v, sqs pid %d alive %v",
				dynamoPID, emulator.Alive(dynamoPID), sqsPID, emulator.Alive(sqsPID))
		case <-tick.C:
		}
	}
	return stderr.String(), waitErr
}
