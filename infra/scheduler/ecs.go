package scheduler

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// ECSExecutor allows the ecs executor (docs/api.md, "Executors"): the
// clusters jobs' tasks may run on and the task definitions they may run.
// The scheduler refuses a job naming others (422 invalid_field), and its
// functions may run exactly these task definitions on exactly these
// clusters.
type ECSExecutor struct {
	// Clusters are cluster names in the stack's account and region.
	Clusters []string `json:"clusters"`
	// TaskDefinitions are the task definitions jobs may name.
	TaskDefinitions []ECSTaskDefinition `json:"taskDefinitions"`
}

// ECSTaskDefinition is one task definition the ecs executor may run.
type ECSTaskDefinition struct {
	// Family is the task definition's family (any of its revisions may
	// run): "etl" for etl:1, etl:2, ...
	Family string `json:"family"`
	// TaskRoleArn and ExecutionRoleArn are the task definition's roles:
	// RunTask passes them to ECS, so the functions that run tasks may
	// pass exactly these (iam:PassRole). Empty when it has none.
	TaskRoleArn      string `json:"taskRoleArn,omitempty"`
	ExecutionRoleArn string `json:"executionRoleArn,omitempty"`
}

// ecsActions are the ecs executor's calls (shared/ecsexec): RunTask when a
// function dispatches, DescribeTasks for a LOST attempt's evidence,
// StopTask for a cancel that outlived its timeout. Every function that
// settles an instance's due timer makes the last two (observers).
var (
	ecsRun      = []string{"ecs:RunTask"}
	ecsObserve  = []string{"ecs:DescribeTasks", "ecs:StopTask"}
	iamPassRole = []string{"iam:PassRole"}
	// ecsObservers settle due timers (shared/scheduler's reconcileInstance).
	ecsObservers = []string{FunctionEvents, FunctionTicker, FunctionReconciler}
)

var (
	ecsName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	roleARN = regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+$`)
)

// validate reports every problem with e at once.
func (e *ECSExecutor) validate() error {
	if e == nil {
		return nil
	}
	var errs []error
	if len(e.Clusters) == 0 {
		errs = append(errs, errors.New("ECS.Clusters: name at least one cluster"))
	}
	if len(e.TaskDefinitions) == 0 {
		errs = append(errs, errors.New("ECS.TaskDefinitions: name at least one task definition"))
	}
	for _, c := range e.Clusters {
		if !ecsName.MatchString(c) {
			errs = append(errs, fmt.Errorf("ECS.Clusters: %q is not a cluster name (letters, digits, '-', '_')", c))
		}
	}
	for _, td := range e.TaskDefinitions {
		if !ecsName.MatchString(td.Family) {
			errs = append(errs, fmt.Errorf("ECS.TaskDefinitions: family %q: want letters, digits, '-', '_' (no revision)", td.Family))
		}
		for _, r := range []string{td.TaskRoleArn, td.ExecutionRoleArn} {
			if r != "" && !roleARN.MatchString(r) {
				errs = append(errs, fmt.Errorf("ECS.TaskDefinitions[%s]: %q is not an IAM role ARN", td.Family, r))
			}
		}
	}
	return errors.Join(errs...)
}

// families lists the task definitions' families.
func (e *ECSExecutor) families() []string {
	out := make([]string, len(e.TaskDefinitions))
	for i, td := range e.TaskDefinitions {
		out[i] = td.Family
	}
	return out
}

// roles lists the task definitions' roles, each once.
func (e *ECSExecutor) roles() []string {
	var out []string
	seen := map[string]bool{}
	for _, td := range e.TaskDefinitions {
		for _, r := range []string{td.TaskRoleArn, td.ExecutionRoleArn} {
			if r != "" && !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	return out
}

// ecsARN is an ECS ARN of the stack's partition, region and account.
func ecsARN(resource string) *string {
	return awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":ecs:"), awscdk.Aws_REGION(),
		jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":" + resource),
	})
}

// wireECS gives the functions that dispatch what the ecs executor needs:
// the API's URL (the containers' RUNLEDGER_API_URL) in their environment
// (the allow-lists: wireExecutorsAllowed), and exactly these grants:
//   - ecs:RunTask on each allowed family's revisions, only on the allowed
//     clusters (condition ecs:cluster), for the functions that dispatch;
//   - iam:PassRole on the task definitions' roles, only to ECS tasks;
//   - ecs:DescribeTasks and ecs:StopTask on the allowed clusters' tasks
//     (an ARN pattern per cluster), for the functions that settle due
//     timers: the reconciler (its pass), the ticker (a due timer it
//     fires) and events (a delayed timer, a failed invocation's record),
//     each of which may time out a cancel (StopTask) and resolve a LOST
//     attempt on its task's evidence (DescribeTasks).
func (s *Scheduler) wireECS(p Props) {
	e := p.ECS
	if e == nil {
		return
	}
	var clusterARNs, defARNs, taskARNs []*string
	for _, c := range e.Clusters {
		clusterARNs = append(clusterARNs, ecsARN("cluster/"+c))
		taskARNs = append(taskARNs, ecsARN("task/"+c+"/*"))
	}
	for _, f := range e.families() {
		defARNs = append(defARNs, ecsARN("task-definition/"+f+":*"))
	}
	for _, name := range dispatchers {
		fn, ok := s.Functions[name]
		if !ok {
			continue
		}
		s.setEnv(name, "RUNLEDGER_API_URL", s.API.ApiEndpoint())
		run := allow(ecsRun, defARNs...)
		run.AddCondition(jsii.String("ArnEquals"), map[string]any{"ecs:cluster": clusterARNs})
		fn.Role().AddToPrincipalPolicy(run)
		if roles := e.roles(); len(roles) > 0 {
			pass := allow(iamPassRole, *jsii.Strings(roles...)...)
			pass.AddCondition(jsii.String("StringEquals"), map[string]any{"iam:PassedToService": "ecs-tasks.amazonaws.com"})
			fn.Role().AddToPrincipalPolicy(pass)
		}
		if slices.Contains(ecsObservers, name) {
			fn.Role().AddToPrincipalPolicy(allow(ecsObserve, taskARNs...))
		}
		suppress(fn.Role(), "AwsSolutions-IAM5", "The ecs executor runs any revision of the allowed task definition families "+
			"(task-definition/<family>:*) and observes and stops only the tasks of the allowed clusters (task/<cluster>/*): "+
			"task ARNs are not known before RunTask creates them.")
	}
}
