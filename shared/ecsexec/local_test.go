package ecsexec_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/scheduler"
)

func waitStopped(t *testing.T, p *ecsexec.Processes, arn string) ecsexec.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Wait(ctx, arn); err != nil {
		t.Fatalf("task %s did not stop: %v", arn, err)
	}
	tk, err := p.DescribeTask(context.Background(), "dev", arn)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// A local task is a process of its task definition's command with the
// container's environment; its view is RUNNING while it runs and STOPPED
// with its real exit status after.
func TestProcessesRunWithTheContainersEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	p := &ecsexec.Processes{Definitions: map[string][]string{
		"etl": {"sh", "-c", `echo "$RUNLEDGER_RUN $RUNLEDGER_ATTEMPT" > "$OUT"; read line; exit 3`},
	}, Environ: []string{"PATH=" + os.Getenv("PATH"), "OUT=" + out}}
	arn, err := p.RunTask(context.Background(), ecsexec.RunInput{Cluster: "dev", TaskDefinition: "arn:aws:ecs:eu-west-1:1:task-definition/etl:4", Container: "app",
		Env: []ecsexec.EnvVar{{Name: "RUNLEDGER_RUN", Value: "r1"}, {Name: "RUNLEDGER_ATTEMPT", Value: "2"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ecsexec.ClusterOfARN(arn) != "dev" {
		t.Fatalf("ARN %q: want a task ARN on cluster dev", arn)
	}
	tk, err := p.DescribeTask(context.Background(), "dev", arn)
	if err != nil || tk.LastStatus != ecsexec.StatusRunning {
		t.Fatalf("while it reads stdin: %+v %v, want RUNNING", tk, err)
	}
	// Its stdin is /dev/null: read ends, and it exits 3.
	tk = waitStopped(t, p, arn)
	if tk.LastStatus != ecsexec.StatusStopped || len(tk.Containers) != 1 || *tk.Containers[0].ExitCode != 3 || tk.Containers[0].Name != "app" {
		t.Fatalf("after exit: %+v", tk)
	}
	b, err := os.ReadFile(out)
	if err != nil || strings.TrimSpace(string(b)) != "r1 2" {
		t.Fatalf("environment seen by the process: %q %v", b, err)
	}
}

// SIGKILL is status 137, as ECS reports a killed container; StopTask ends
// the whole process group (SIGTERM, then SIGKILL after the grace).
func TestProcessesKillAndStop(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	p := &ecsexec.Processes{Definitions: map[string][]string{
		"sleeper":  {"sleep", "60"},
		"stubborn": {"sh", "-c", `trap "" TERM; touch "$READY"; sleep 60 & wait`},
	}, StopGrace: 200 * time.Millisecond, Environ: []string{"PATH=" + os.Getenv("PATH"), "READY=" + ready}}
	arn, err := p.RunTask(context.Background(), ecsexec.RunInput{Cluster: "dev", TaskDefinition: "sleeper", Container: "app"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(arn, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if tk := waitStopped(t, p, arn); *tk.Containers[0].ExitCode != 137 {
		t.Fatalf("killed: %+v, want exit 137", tk)
	}
	if ev := ecsexec.Judge(waitStopped(t, p, arn), "app"); ev.Verdict != scheduler.VerdictFailed || *ev.ExitCode != 137 {
		t.Fatalf("verdict on a killed task: %+v", ev)
	}

	arn, err = p.RunTask(context.Background(), ecsexec.RunInput{Cluster: "dev", TaskDefinition: "stubborn", Container: "app"})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat(ready); err == nil {
			break // it ignores SIGTERM from now on
		}
		if time.Now().After(deadline) {
			t.Fatal("the stubborn task never got ready")
		}
		time.Sleep(10 * time.Millisecond) // a poll interval
	}
	if err := p.StopTask(context.Background(), "dev", arn, "cancelled"); err != nil {
		t.Fatal(err)
	}
	tk := waitStopped(t, p, arn)
	if tk.StopCode != "UserInitiated" || tk.StoppedReason != "cancelled" || *tk.Containers[0].ExitCode != 137 {
		t.Fatalf("stopped: %+v, want UserInitiated, exit 137 after the grace", tk)
	}
	p.Forget(arn)
	if tk, _ := p.DescribeTask(context.Background(), "dev", arn); !tk.Missing {
		t.Fatalf("forgotten task: %+v, want MISSING", tk)
	}
}

func TestProcessesRefuseAnUnregisteredDefinition(t *testing.T) {
	p := &ecsexec.Processes{}
	if _, err := p.RunTask(context.Background(), ecsexec.RunInput{Cluster: "dev", TaskDefinition: "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("error %v, want a refusal naming the task definition", err)
	}
}

// Run's end kills the processes still running: the stack leaves none.
func TestProcessesRunKillsWhatIsLeft(t *testing.T) {
	p := &ecsexec.Processes{Definitions: map[string][]string{"sleeper": {"sleep", "60"}}}
	arn, err := p.RunTask(context.Background(), ecsexec.RunInput{Cluster: "dev", TaskDefinition: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if tk, _ := p.DescribeTask(context.Background(), "dev", arn); tk.LastStatus != ecsexec.StatusStopped {
		t.Fatalf("after Run: %+v, want STOPPED", tk)
	}
}
