package ecsexec_test

import (
	"context"
	"testing"

	"github.com/runledger/runledger/shared/ecsexec"
	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

func TestJudge(t *testing.T) {
	stopped := func(code *int, containers ...string) ecsexec.Task {
		tk := ecsexec.Task{ARN: taskARN, LastStatus: "STOPPED"}
		for _, name := range containers {
			c := ecsexec.Container{Name: name}
			if name == "app" {
				c.ExitCode = code
			}
			tk.Containers = append(tk.Containers, c)
		}
		return tk
	}
	cases := []struct {
		name      string
		task      ecsexec.Task
		container string
		verdict   scheduler.Verdict
		category  string
		exit      *int
	}{
		{"exit 0 without a report", stopped(ptr(0), "app"), "app", scheduler.VerdictFailed, ecsexec.CategoryExitedWithoutReport, ptr(0)},
		{"non-zero exit", stopped(ptr(137), "app"), "app", scheduler.VerdictFailed, ecsexec.CategoryContainerFailed, ptr(137)},
		{"the named container counts", stopped(ptr(2), "sidecar", "app"), "app", scheduler.VerdictFailed, ecsexec.CategoryContainerFailed, ptr(2)},
		{"the only container when none is named", stopped(ptr(4), "app"), "", scheduler.VerdictFailed, ecsexec.CategoryContainerFailed, ptr(4)},
		{"stopped without an exit code", stopped(nil, "app"), "app", scheduler.VerdictGone, "", nil},
		{"running", ecsexec.Task{ARN: taskARN, LastStatus: "RUNNING", Containers: []ecsexec.Container{{Name: "app"}}}, "app", scheduler.VerdictRunning, "", nil},
		{"pending", ecsexec.Task{ARN: taskARN, LastStatus: "PENDING"}, "app", scheduler.VerdictRunning, "", nil},
		{"missing", ecsexec.Task{ARN: taskARN, Missing: true}, "app", scheduler.VerdictUnknown, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := ecsexec.Judge(tc.task, tc.container)
			if ev.Verdict != tc.verdict || ev.ErrorCategory != tc.category {
				t.Fatalf("verdict %s category %q, want %s %q (detail %v)", ev.Verdict, ev.ErrorCategory, tc.verdict, tc.category, ev.Detail)
			}
			if (ev.ExitCode == nil) != (tc.exit == nil) || (ev.ExitCode != nil && *ev.ExitCode != *tc.exit) {
				t.Fatalf("exit code %v, want %v", ev.ExitCode, tc.exit)
			}
			if ev.Detail["task_arn"] != taskARN {
				t.Fatalf("detail %v does not name the task", ev.Detail)
			}
		})
	}
}

// Check describes the attempt's task on the cluster its ARN names, and
// judges the spec's container.
func TestEvidenceAsksECSAboutTheAttemptsTask(t *testing.T) {
	f, c := newFakeECS(t, map[string]string{
		targetPrefix + "DescribeTasks": `{"tasks":[{"taskArn":"` + taskARN + `","lastStatus":"STOPPED","containers":[{"name":"app","exitCode":1}]}]}`,
	})
	x := ecsexec.NewExecutor(c, "http://api")
	spec := jobspec.Executor{Type: "ecs", Cluster: "other", Container: "app"}
	ev, err := x.Check(context.Background(), spec, ledger.Instance{}, statemodel.AttemptRecord{N: 1, ExecutorID: taskARN})
	if err != nil {
		t.Fatal(err)
	}
	if ev.Verdict != scheduler.VerdictFailed || *ev.ExitCode != 1 {
		t.Fatalf("evidence %+v", ev)
	}
	if got := f.only(t).body["cluster"]; got != "batch" {
		t.Fatalf("cluster %v, want batch (from the ARN)", got)
	}
	ev, err = x.Check(context.Background(), spec, ledger.Instance{}, statemodel.AttemptRecord{N: 1})
	if err != nil || ev.Verdict != scheduler.VerdictUnknown {
		t.Fatalf("an attempt without a task: %+v %v, want unknown", ev, err)
	}
	f.only(t) // no second call
}

func TestClusterOfARN(t *testing.T) {
	for arn, want := range map[string]string{
		taskARN: "batch",
		"arn:aws:ecs:local:000000000000:task/dev/abc": "dev",
		"arn:aws:ecs:eu-west-1:1:task/abc":            "", // the old format names no cluster
		"not-an-arn":                                  "",
	} {
		if got := ecsexec.ClusterOfARN(arn); got != want {
			t.Errorf("ClusterOfARN(%q) = %q, want %q", arn, got, want)
		}
	}
}
