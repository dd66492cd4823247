package ecsexec

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/scheduler"
	"github.com/runledger/runledger/statemodel"
)

// Executor starts attempts as ECS tasks: the scheduler's Executor of
// type ecs (scheduler.Executor documents the contract).
type Executor struct {
	Tasks Tasks
	// apiURL is the API's base URL as the containers reach it
	// (RUNLEDGER_API_URL); the local stack knows it only once it serves.
	apiURL atomic.Pointer[string]
}

// NewExecutor returns an executor over tasks whose containers call the API
// at apiURL ("": not known yet, see SetAPIURL).
func NewExecutor(tasks Tasks, apiURL string) *Executor {
	x := &Executor{Tasks: tasks}
	x.SetAPIURL(apiURL)
	return x
}

// SetAPIURL sets the URL the containers get as RUNLEDGER_API_URL.
func (x *Executor) SetAPIURL(u string) { x.apiURL.Store(&u) }

var _ scheduler.Executor = (*Executor)(nil)

// Type is the executor type it serves.
func (*Executor) Type() string { return jobspec.ExecutorECS }

// Start runs the attempt of env as one task of spec and returns the
// task's ARN, the attempt's executor id. The container's environment is
// protocol.StartEnv with the attempt's one-time claim nonce, never its
// token: RunTask's overrides are shown to every principal allowed
// ecs:DescribeTasks and recorded by CloudTrail, and the nonce is worth
// nothing once the container has claimed the attempt (its claim answer
// carries the token). An attempt without a nonce (its run was created
// before attempts had one) gets its token, as before.
func (x *Executor) Start(ctx context.Context, env protocol.Envelope, spec jobspec.Executor) (string, error) {
	apiURL := *x.apiURL.Load()
	if apiURL == "" {
		return "", fmt.Errorf("start %s: the API's URL for the containers is not known yet", env.Ref())
	}
	ct, err := clientToken()
	if err != nil {
		return "", fmt.Errorf("start %s: %w", env.Ref(), err)
	}
	in := RunInput{
		Cluster: spec.Cluster, TaskDefinition: spec.TaskDefinition, Container: spec.Container,
		Subnets: spec.Subnets, SecurityGroups: spec.SecurityGroups, LaunchType: spec.LaunchType,
		ClientToken: ct,
	}
	cred := protocol.ClaimCredential{Nonce: env.ClaimNonce}
	if cred.Nonce == "" {
		cred.Token = env.Token
	}
	for _, v := range protocol.StartEnv(env.Ref(), cred, apiURL) {
		in.Env = append(in.Env, EnvVar{Name: v.Name, Value: v.Value})
	}
	arn, err := x.Tasks.RunTask(ctx, in)
	if err != nil {
		return "", fmt.Errorf("start %s: %w", env.Ref(), err)
	}
	return arn, nil
}

// Stop asks ECS to stop the attempt's task (a cancel that outlived its
// timeout). The task's end then resolves the attempt (Check).
func (x *Executor) Stop(ctx context.Context, arn string, spec jobspec.Executor) error {
	return x.Tasks.StopTask(ctx, clusterOf(arn, spec), arn, "runledger: the attempt was cancelled")
}

// Check resolves a LOST ecs attempt by DescribeTasks on its executor id
// (the task ARN), judged by Judge on spec's container.
func (x *Executor) Check(ctx context.Context, spec jobspec.Executor, _ ledger.Instance, a statemodel.AttemptRecord) (scheduler.Evidence, error) {
	arn := a.ExecutorID
	if arn == "" {
		return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, nil
	}
	t, err := x.Tasks.DescribeTask(ctx, clusterOf(arn, spec), arn)
	if err != nil {
		return scheduler.Evidence{Verdict: scheduler.VerdictUnknown}, err
	}
	return Judge(t, spec.Container), nil
}

// clusterOf is the cluster a task ARN names, else the spec's.
func clusterOf(arn string, spec jobspec.Executor) string {
	if c := ClusterOfARN(arn); c != "" {
		return c
	}
	return spec.Cluster
}

// RecheckRunning is how often a LOST attempt whose task still runs is
// described again: its end then resolves the attempt within this, not at
// the evidence window's end. One DescribeTasks call each time.
const RecheckRunning = 5 * time.Second

// clientToken is RunTask's idempotency token for one Start: random, so
// the SDK's retries of the call start no second task, while a later Start
// of the same attempt (a RunTask that ECS refused, tried again by the
// instance's timer) is a new request and not ECS's remembered answer to
// the first. Two dispatchers racing on one attempt may so start two tasks:
// both hold the same claim nonce, one claim wins, and the other container's
// claim is refused and it exits without running the payload.
func clientToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("client token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Judge is the verdict on a LOST attempt whose task ECS describes as t,
// container being the one that runs the attempt:
//   - a task whose container has exited is a confirmed outcome: status 0
//     with no completion is a failure with category exited_without_report
//     (a success the container never reported cannot be trusted), any
//     other status a failure with that exit code (container_failed);
//   - STOPPED without an exit code (the task never ran its container, or
//     ECS stopped it from outside): the process is gone, how the attempt
//     ended is unknown (scheduler.VerdictGone);
//   - any other status (PENDING, RUNNING, ...): still running, held, and
//     described again after RecheckRunning;
//   - MISSING (ECS has forgotten the task): unknown, the evidence window
//     decides.
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
	return scheduler.Evidence{Verdict: scheduler.VerdictRunning, Detail: detail, RecheckAfter: RecheckRunning}
}
