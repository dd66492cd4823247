package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// The ecs executor end to end: the local stack runs its tasks as local
// processes (app.LocalECS) and answers DescribeTasks from their real exit
// status, through the same scheduler code as in AWS (dispatch by
// Executor.Start, evidence by Executor.Check, cancel by Executor.Stop).
// Two task definitions stand for two images:
//   - "etl": the CLI's container entry, `runledger task run -- sh -c
//     {{.Params.script}}`, as a non-Go image would run it;
//   - "inproc": this test binary as a Go container (ecsContainer), which
//     runs worker.RunFromEnv with a handler steered by the run's params,
//     so that a signal to the task reaches all of it.

// ecsContainerArg makes the test binary a container (TestMain).
const ecsContainerArg = "runledger-e2e-ecs-container"

// ecsContainer is the "inproc" image: it claims the attempt its
// environment names and runs a handler steered by params.mode:
//   - "sleep": wait for the ctx's end (a cancel, a lost lease);
//   - "ignore_cancel": never return (only StopTask ends it);
//   - "nonce": check what the claim nonce is worth once the container
//     claimed with it (nonceSpent);
//
// attempts after the first succeed at once. It exits 0 on a reported
// success, else 1.
func ecsContainer() int {
	h := func(ctx context.Context, tk worker.Task) error {
		var p struct{ Mode string }
		_ = tk.DecodeParams(&p)
		if tk.Attempt > 1 {
			return nil
		}
		switch p.Mode {
		case "sleep":
			<-ctx.Done()
			return ctx.Err()
		case "ignore_cancel":
			select {}
		case "nonce":
			return nonceSpent(ctx, tk)
		}
		return fmt.Errorf("unknown mode %q", p.Mode)
	}
	if err := worker.RunFromEnv(context.Background(), h); err != nil {
		fmt.Fprintln(os.Stderr, "ecs container:", err)
		return 1
	}
	return 0
}

// nonceSpent checks, inside a container that claimed its attempt, that its
// start environment held the claim nonce and not the token, and that the
// nonce claims, heartbeats and completes nothing now; an error says which
// check failed, and fails the attempt.
func nonceSpent(ctx context.Context, tk worker.Task) error {
	nonce := os.Getenv(protocol.EnvClaimNonce)
	switch {
	case nonce == "":
		return errors.New("the start environment holds no claim nonce")
	case os.Getenv(protocol.EnvToken) != "":
		return errors.New("the start environment holds the attempt's token")
	case tk.Token == "" || tk.Token == nonce:
		return errors.New("the claim did not answer the token")
	}
	for _, kv := range os.Environ() {
		if strings.Contains(kv, tk.Token) {
			return errors.New("the start environment holds the attempt's token")
		}
	}
	c := worker.NewClient(os.Getenv(protocol.EnvAPIURL), nil)
	ref := worker.AttemptRef{Run: tk.Run, Task: tk.Task, Attempt: tk.Attempt}
	if _, err := c.Claim(ctx, nonce, worker.ClaimRequest{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, WorkerID: "thief@boot", EventID: "again"}); !errors.Is(err, worker.ErrInvalidToken) {
		return fmt.Errorf("a second claim with the nonce: %v, want invalid_token", err)
	}
	if _, err := c.Heartbeat(ctx, nonce, worker.HeartbeatRequest{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "beat"}); !errors.Is(err, worker.ErrInvalidToken) {
		return fmt.Errorf("a heartbeat with the nonce: %v, want invalid_token", err)
	}
	comp := worker.Completion{Run: ref.Run, Task: ref.Task, Attempt: ref.Attempt, EventID: "forged", Outcome: worker.OutcomeFailed, ErrorCategory: "forged"}
	if _, err := c.Complete(ctx, nonce, comp); !errors.Is(err, worker.ErrInvalidToken) {
		return fmt.Errorf("a completion with the nonce: %v, want invalid_token", err)
	}
	return nil
}

type ecsStack struct {
	*stack
	procs *ecsexec.Processes
}

func startECSStack(t *testing.T) *ecsStack {
	t.Helper()
	bin := cliBinary(t)
	part, procs, err := app.LocalECS{
		Definitions: map[string][]string{
			"etl":    {bin, "task", "run", "--kill-grace", "1s", "--", "sh", "-c", "{{.Params.script}}"},
			"inproc": {os.Args[0], ecsContainerArg},
		},
		StopGrace: 2 * time.Second,
		Logger:    e2eLogger(),
	}.Part()
	if err != nil {
		t.Fatal(err)
	}
	s := startStack(t, devstack.Options{Parts: []app.Part{part}})
	return &ecsStack{stack: s, procs: procs}
}

// ecsJob is a quick one-task job whose task runs as an ecs task of def.
func ecsJob(name, def string, over map[string]any) map[string]any {
	j := quickJob(name, nil)
	// A claim's answer may take a second on this shared machine (the
	// claim performs the run's start before it answers): a heartbeat
	// timeout of 2 s would leave the container's SDK no lease to run on.
	j["timeouts"] = map[string]any{"heartbeat": "6s", "queue": "30s", "cancel": "2s", "run": "1m"}
	for k, v := range over {
		j[k] = v
	}
	j["executor"] = map[string]any{"type": "ecs", "cluster": "local", "task_definition": def, "container": "app",
		"subnets": []string{"subnet-local"}}
	return j
}

// task is the local ecs task of an attempt, described.
func (s *ecsStack) task(a attemptDetail) ecsexec.Task {
	s.t.Helper()
	if a.ExecutorID == nil || !strings.HasPrefix(*a.ExecutorID, "arn:aws:ecs:local:") {
		s.t.Fatalf("attempt %d: executor id %v, want a local task ARN", a.N, a.ExecutorID)
	}
	tk, err := s.procs.DescribeTask(context.Background(), "local", *a.ExecutorID)
	if err != nil {
		s.t.Fatal(err)
	}
	return tk
}

// waitStopped polls until the attempt's task has stopped and returns it.
func (s *ecsStack) waitStopped(a attemptDetail) ecsexec.Task {
	s.t.Helper()
	var tk ecsexec.Task
	eventually(s.t, 20*time.Second, "task of attempt "+fmt.Sprint(a.N)+" stops", func() (bool, string) {
		tk = s.task(a)
		return tk.LastStatus == ecsexec.StatusStopped, tk.String()
	})
	return tk
}

// e2eLogger logs to stderr under RUNLEDGER_E2E_LOG, else nowhere.
func e2eLogger() *slog.Logger {
	if os.Getenv("RUNLEDGER_E2E_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func exitOf(tk ecsexec.Task) int {
	if len(tk.Containers) != 1 || tk.Containers[0].ExitCode == nil {
		return -1
	}
	return *tk.Containers[0].ExitCode
}

func TestECSExecutor(t *testing.T) {
	s := startECSStack(t)
	params := func(kv ...string) map[string]any {
		p := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			p[kv[i]] = kv[i+1]
		}
		return map[string]any{"params": p}
	}

	// The container gets only the attempt's name and token; its claim
	// answers with the payload, which the command reads.
	t.Run("success", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-ok", "etl", nil))
		run := s.trigger("ecs-ok", params("script", `case "$RUNLEDGER_PAYLOAD" in *'"ecs-ok"'*) exit 0;; *) echo "payload $RUNLEDGER_PAYLOAD" >&2; exit 9;; esac`))
		s.waitRun(run, 30*time.Second, "SUCCEEDED", "FAILED")
		td := s.runDetail(run).task("main")
		a := td.attempt(t, 1)
		if td.State != "SUCCEEDED" || a.WorkerID == nil {
			t.Fatalf("task %s, attempt %+v: want SUCCEEDED, claimed by the container", td.State, a)
		}
		if tk := s.waitStopped(a); exitOf(tk) != 0 {
			t.Fatalf("container %+v (%v), want exit 0", tk, exitOf(tk))
		}
		raw := s.call("GET", "/v1/runs/"+run, nil).must(t, http.StatusOK).Raw
		if !strings.Contains(string(raw), `"executor":"ecs"`) {
			t.Fatalf("run view does not name the ecs executor: %s", raw)
		}
	})

	// The container gets the attempt's claim nonce, never its token: it
	// claims with the nonce, runs on the token the claim answered, and the
	// nonce is worth nothing from then on.
	t.Run("claim nonce", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-nonce", "inproc", map[string]any{"retry": map[string]any{"max_attempts": 1}}))
		run := s.trigger("ecs-nonce", params("mode", "nonce"))
		s.waitRun(run, 30*time.Second, "SUCCEEDED", "FAILED")
		td := s.runDetail(run).task("main")
		if a := td.attempt(t, 1); td.State != "SUCCEEDED" || a.WorkerID == nil {
			t.Fatalf("task %s, attempt %+v (%s): want SUCCEEDED, claimed by the container", td.State, a, describeTransitions(s.history(run, "main")))
		}
	})

	// A non-zero exit is the attempt's failure with that exit code.
	t.Run("failure", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-fail", "etl", map[string]any{"retry": map[string]any{"max_attempts": 1}}))
		run := s.trigger("ecs-fail", params("script", "echo broken input >&2; exit 3"))
		s.waitRun(run, 30*time.Second, "FAILED", "SUCCEEDED")
		td := s.runDetail(run).task("main")
		a := td.attempt(t, 1)
		if td.State != "FAILED" || a.ExitCode == nil || *a.ExitCode != 3 || str(a.ErrorCategory) != "command_failed" {
			t.Fatalf("task %s, attempt %+v: want FAILED with exit code 3 (command_failed)", td.State, a)
		}
		if h := s.history(run, "main"); !strings.Contains(h[len(h)-1].Reason, "broken input") {
			t.Fatalf("last transition's reason %q, want the stderr tail", h[len(h)-1].Reason)
		}
		if tk := s.waitStopped(a); exitOf(tk) != 3 {
			t.Fatalf("container %+v, want exit 3", tk)
		}
	})

	// A failed attempt is retried as a new task.
	t.Run("retry", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-retry", "etl", nil))
		run := s.trigger("ecs-retry", params("script", `[ "$RUNLEDGER_ATTEMPT" -ge 2 ] || exit 1`))
		s.waitRun(run, 30*time.Second, "SUCCEEDED", "FAILED")
		td := s.runDetail(run).task("main")
		a1, a2 := td.attempt(t, 1), td.attempt(t, 2)
		if td.State != "SUCCEEDED" || td.Attempt != 2 || a1.ExitCode == nil || *a1.ExitCode != 1 || a2.State != "SUCCEEDED" {
			t.Fatalf("task %s attempt %d: %+v %+v, want attempt 1 failed (exit 1), attempt 2 succeeded", td.State, td.Attempt, a1, a2)
		}
		if *a1.ExecutorID == *a2.ExecutorID {
			t.Fatalf("both attempts ran as task %s, want one task each", *a1.ExecutorID)
		}
	})

	// LOST resolved by the executor's evidence: a task still running past
	// its lost lease (frozen by SIGSTOP, so it sends no heartbeat) is held
	// LOST over reconciler passes; once killed (SIGKILL), its exit status
	// 137 is a confirmed failure, and the attempt is retried.
	t.Run("lost", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-lost", "inproc", map[string]any{"evidence_window": "2m"}))
		run := s.trigger("ecs-lost", params("mode", "sleep"))
		a := s.waitDetail(run, "main", "RUNNING", 30*time.Second).attempt(t, 1)
		if err := s.procs.Signal(*a.ExecutorID, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		s.waitDetail(run, "main", "LOST", 30*time.Second)
		passes := func() int64 { return s.Counters.Snapshot().Functions["reconciler"].Invocations }
		from := passes()
		eventually(t, 30*time.Second, "three reconciler passes", func() (bool, string) { return passes() >= from+3, fmt.Sprint(passes() - from) })
		h := s.history(run, "main")
		if last := h[len(h)-1]; last.To != "LOST" || s.runDetail(run).task("main").State != "LOST" {
			t.Fatalf("after three passes while the task runs: history ends %+v, want held LOST", last)
		}
		if tk := s.task(a); tk.LastStatus != ecsexec.StatusRunning {
			t.Fatalf("task %+v, want RUNNING while frozen", tk)
		}

		if err := s.procs.Signal(*a.ExecutorID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.waitRun(run, 30*time.Second, "SUCCEEDED", "FAILED")
		td := s.runDetail(run).task("main")
		a1 := td.attempt(t, 1)
		if td.State != "SUCCEEDED" || td.Attempt != 2 || a1.State != "FAILED" || a1.ExitCode == nil || *a1.ExitCode != 137 ||
			str(a1.ErrorCategory) != ecsexec.CategoryContainerFailed {
			t.Fatalf("task %s attempt %d, attempt 1 %+v: want attempt 1 failed with exit 137 (container_failed), attempt 2 succeeded", td.State, td.Attempt, a1)
		}
		var found bool
		for _, tr := range s.history(run, "main") {
			if tr.Event == "evidence.failed" && tr.Evidence["provider"] == "ecs" && tr.Evidence["exit_code"] == "137" {
				found = true
			}
		}
		if !found {
			t.Fatalf("no evidence.failed from the ecs provider with exit code 137 in %s", describeTransitions(s.history(run, "main")))
		}
	})

	// A cancel reaches the command through the container's heartbeat; the
	// process is gone afterwards.
	t.Run("cancel", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-cancel", "etl", nil))
		run := s.trigger("ecs-cancel", params("script", "sleep 60"))
		a := s.waitDetail(run, "main", "RUNNING", 30*time.Second).attempt(t, 1)
		s.cancelTask(run, "main", "not needed")
		s.waitDetail(run, "main", "CANCELLED", 30*time.Second)
		if tk := s.waitStopped(a); tk.LastStatus != ecsexec.StatusStopped {
			t.Fatalf("task %+v, want STOPPED", tk)
		}
	})

	// A container that ignores the cancel is stopped by StopTask at the
	// cancel timeout; its end (SIGTERM: 143) resolves the attempt
	// CANCELLED, and the process is gone.
	t.Run("cancel ignored", func(t *testing.T) {
		s.t = t
		s.createJob(ecsJob("ecs-stubborn", "inproc", map[string]any{"evidence_window": "2m"}))
		run := s.trigger("ecs-stubborn", params("mode", "ignore_cancel"))
		a := s.waitDetail(run, "main", "RUNNING", 30*time.Second).attempt(t, 1)
		s.cancelTask(run, "main", "stop it")
		td := s.waitDetail(run, "main", "CANCELLED", 30*time.Second)
		tk := s.waitStopped(a)
		if tk.StopCode != "UserInitiated" || exitOf(tk) != 143 {
			t.Fatalf("task %+v, want stopped by StopTask (SIGTERM, exit 143)", tk)
		}
		if a1 := td.attempt(t, 1); a1.State != "CANCELLED" {
			t.Fatalf("attempt %+v, want CANCELLED", a1)
		}
	})
}

func describeTransitions(h []transition) string {
	b, _ := json.Marshal(h)
	return string(b)
}
