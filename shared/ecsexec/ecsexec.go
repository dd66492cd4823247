// Package ecsexec is the ecs executor: the scheduler starts an attempt as
// an ECS task (RunTask, Fargate or EC2) whose container gets only the
// attempt's name, its one-time claim nonce and the API's URL in its
// environment (protocol.StartEnv) and claims the attempt to get its
// envelope and token; the
// executor id is the task's ARN. When the attempt goes LOST, Evidence asks
// ECS (DescribeTasks) what became of the task; a cancel that outlives its
// timeout stops it (StopTask).
//
// The executor talks to ECS through Tasks, a port in its own terms: Client
// implements it over the AWS SDK, and Processes runs the tasks as local
// processes for the local stack, with the same view of a task built from
// the process's real exit status. So the executor, the evidence and the
// scheduler above them run the same code in both places.
package ecsexec

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Error categories the ecs evidence records on a failed attempt.
const (
	// CategoryExitedWithoutReport: the container exited 0 but the attempt
	// never completed (it gave up, or its report was lost).
	CategoryExitedWithoutReport = "exited_without_report"
	// CategoryContainerFailed: the container exited with a non-zero
	// status; the attempt records it as its exit code.
	CategoryContainerFailed = "container_failed"
)

// Task statuses (ECS's lastStatus) the evidence tells apart.
const (
	StatusRunning = "RUNNING"
	StatusStopped = "STOPPED"
)

// RunInput is one RunTask: which task definition, where, and the
// environment of the container that runs the attempt.
type RunInput struct {
	Cluster        string
	TaskDefinition string
	// Container is the container of the task definition that gets Env.
	Container      string
	Subnets        []string
	SecurityGroups []string
	// LaunchType is jobspec.LaunchFargate (default) or jobspec.LaunchEC2.
	LaunchType string
	Env        []EnvVar
	// ClientToken makes the call idempotent: ECS starts one task per
	// token, however often the SDK retries the call.
	ClientToken string
}

// EnvVar is one variable of the container's environment.
type EnvVar struct{ Name, Value string }

// Task is what ECS says of one task.
type Task struct {
	ARN string
	// Missing: ECS does not know the task (it forgets stopped tasks after
	// about an hour), so nothing can be said of it.
	Missing bool
	// LastStatus is ECS's: PROVISIONING, PENDING, ACTIVATING, RUNNING,
	// DEACTIVATING, STOPPING, DEPROVISIONING, STOPPED.
	LastStatus    string
	StopCode      string
	StoppedReason string
	Containers    []Container
}

// Container is one container of a task.
type Container struct {
	Name string
	// ExitCode is set once the container has exited.
	ExitCode *int
	Reason   string
}

// Tasks is the executor's port to ECS: Client over the AWS SDK, Processes
// for the local stack.
type Tasks interface {
	// RunTask starts one task and returns its ARN. ECS's refusal (its
	// `failures`, an API error) is an error: the dispatch failed.
	RunTask(ctx context.Context, in RunInput) (arn string, err error)
	// DescribeTask describes one task of cluster; a task ECS does not
	// know is Task{Missing: true}, not an error.
	DescribeTask(ctx context.Context, cluster, arn string) (Task, error)
	// StopTask asks ECS to stop a task (SIGTERM to its containers, then
	// SIGKILL after their stop timeout).
	StopTask(ctx context.Context, cluster, arn, reason string) error
}

// ErrRefused wraps a RunTask that ECS refused in its answer's `failures`.
var ErrRefused = errors.New("ecs refused the task")

// ClusterOfARN is the cluster name in a task ARN of the long format
// (arn:aws:ecs:<region>:<account>:task/<cluster>/<id>), or "".
func ClusterOfARN(arn string) string {
	_, res, ok := strings.Cut(arn, ":task/")
	if !ok || !strings.HasPrefix(arn, "arn:") {
		return ""
	}
	cluster, _, ok := strings.Cut(res, "/")
	if !ok {
		return ""
	}
	return cluster
}

// exitOf is container's exit code in t: the named one, else the only one.
func (t Task) exitOf(container string) (Container, bool) {
	for _, c := range t.Containers {
		if c.Name == container {
			return c, true
		}
	}
	if len(t.Containers) == 1 && container == "" {
		return t.Containers[0], true
	}
	return Container{}, false
}

func (t Task) String() string {
	if t.Missing {
		return fmt.Sprintf("%s: MISSING", t.ARN)
	}
	return fmt.Sprintf("%s: %s", t.ARN, t.LastStatus)
}
