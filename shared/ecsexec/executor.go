package ecsexec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// Spec is where an ecs attempt runs: the `executor` field of a job or
// task of type ecs.
type Spec struct {
	Cluster        string
	TaskDefinition string
	Container      string
	Subnets        []string
	SecurityGroups []string
	LaunchType     string
}

// Executor starts attempts as ECS tasks.
type Executor struct {
	Tasks Tasks
	// APIURL is the API's base URL as the containers reach it
	// (RUNLEDGER_API_URL).
	APIURL string
}

// Type is the executor type it serves.
func (Executor) Type() string { return Type }

// Start runs the attempt of env as one task of spec and returns the
// task's ARN, the attempt's executor id. The container's environment is
// protocol.StartEnv: it claims the attempt for its envelope.
func (x Executor) Start(ctx context.Context, env protocol.Envelope, spec Spec) (string, error) {
	in := RunInput{
		Cluster: spec.Cluster, TaskDefinition: spec.TaskDefinition, Container: spec.Container,
		Subnets: spec.Subnets, SecurityGroups: spec.SecurityGroups, LaunchType: spec.LaunchType,
		ClientToken: clientToken(env.Token),
	}
	for _, v := range protocol.StartEnv(env.Ref(), env.Token, x.APIURL) {
		in.Env = append(in.Env, EnvVar{Name: v.Name, Value: v.Value})
	}
	arn, err := x.Tasks.RunTask(ctx, in)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", env.Ref(), err)
	}
	return arn, nil
}

// Stop asks ECS to stop the attempt's task (a cancel that outlived its
// timeout). The task's end then resolves the attempt (Evidence).
func (x Executor) Stop(ctx context.Context, arn string, spec Spec) error {
	cluster := spec.Cluster
	if c := ClusterOfARN(arn); c != "" {
		cluster = c
	}
	return x.Tasks.StopTask(ctx, cluster, arn, "runledger: the attempt was cancelled")
}

// clientToken is RunTask's idempotency token for one dispatch: derived
// from the attempt's fencing token (new for every dispatch), so a retried
// call starts no second task, and the token itself is not revealed.
func clientToken(token string) string {
	sum := sha256.Sum256([]byte("ecs-run-task:" + token))
	return hex.EncodeToString(sum[:])[:64]
}

// Evidence resolves a LOST ecs attempt by DescribeTasks on its executor id
// (the task ARN):
//   - a task whose container has exited is a confirmed outcome: status 0
//     with no completion is a failure with category exited_without_report
//     (a success the container never reported cannot be trusted), any
//     other status a failure with that exit code (container_failed);
//   - STOPPED without an exit code (the task never ran its container, or
//     ECS stopped it from outside): the process is gone, how the attempt
//     ended is unknown (scheduler.VerdictGone);
//   - any other status (PENDING, RUNNING, ...): still running, held;
//   - MISSING (ECS has forgotten the task): unknown, the evidence window
//     decides.
//
// Attempts whose executor id is not a task ARN are not its to judge.
type Evidence struct {
	Tasks Tasks
	// Container names the container whose exit code counts, by the
	// instance (its executor spec); nil or "" takes a task's only
	// container.
	Container func(store.Instance) string
}

// Name is the provider's name in the evidence it records.
func (Evidence) Name() string { return "ecs" }

var _ scheduler.EvidenceProvider = Evidence{}

// Check asks ECS about attempt a's task.
func (e Evidence) Check(ctx context.Context, inst store.Instance, a statemodel.AttemptRecord) (scheduler.Evidence, error) {
	arn := a.ExecutorID
	if !IsTaskARN(arn) {
		return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, nil
	}
	t, err := e.Tasks.DescribeTask(ctx, ClusterOfARN(arn), arn)
	if err != nil {
		return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, err
	}
	container := ""
	if e.Container != nil {
		container = e.Container(inst)
	}
	return Judge(t, container), nil
}

// Judge is the verdict on a LOST attempt whose task ECS describes as t
// (see Evidence).
func Judge(t Task, container string) scheduler.Evidence {
	detail := map[string]string{"task_arn": t.ARN}
	if t.Missing {
		detail["finding"] = "task unknown to ECS"
		return scheduler.Evidence{Verdict: scheduler.VerdictUnknown, Detail: detail}
	}
	detail["last_status"] = t.LastStatus
	if t.StopCode != "" {
		detail["stop_code"] = t.StopCode
	}
	if t.StoppedReason != "" {
		detail["stopped_reason"] = t.StoppedReason
	}
	if c, ok := t.exitOf(container); ok && c.ExitCode != nil {
		code := *c.ExitCode
		detail["container"] = c.Name
		detail["exit_code"] = strconv.Itoa(code)
		if c.Reason != "" {
			detail["container_reason"] = c.Reason
		}
		if code == 0 {
			detail["finding"] = "container exited 0 without reporting"
			return scheduler.Evidence{Verdict: scheduler.VerdictFailed, Detail: detail, ErrorCategory: CategoryExitedWithoutReport, ExitCode: &code}
		}
		detail["finding"] = "container exited with status " + strconv.Itoa(code)
		return scheduler.Evidence{Verdict: scheduler.VerdictFailed, Detail: detail, ErrorCategory: CategoryContainerFailed, ExitCode: &code}
	}
	if t.LastStatus == StatusStopped {
		detail["finding"] = "task stopped without an exit code"
		return scheduler.Evidence{Verdict: scheduler.VerdictGone, Detail: detail}
	}
	detail["finding"] = "task " + t.LastStatus
	return scheduler.Evidence{Verdict: scheduler.VerdictRunning, Detail: detail}
}
