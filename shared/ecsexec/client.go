package ecsexec

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// API is what Client needs of the SDK's ECS client; *ecs.Client has it.
type API interface {
	RunTask(ctx context.Context, in *ecs.RunTaskInput, optFns ...func(*ecs.Options)) (*ecs.RunTaskOutput, error)
	DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, optFns ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error)
	StopTask(ctx context.Context, in *ecs.StopTaskInput, optFns ...func(*ecs.Options)) (*ecs.StopTaskOutput, error)
}

var _ API = (*ecs.Client)(nil)

// StartedBy marks the tasks runledger starts (RunTask's startedBy), so
// `aws ecs list-tasks --started-by runledger` finds them.
const StartedBy = "runledger"

// Client is Tasks over ECS.
type Client struct{ API API }

var _ Tasks = Client{}

// RunTask starts one task of in.TaskDefinition on in.Cluster with the
// container's environment overridden. ECS refuses overrides over 8 KiB;
// the start environment is a few hundred bytes, which is why the
// container claims its payload instead of receiving it here.
func (c Client) RunTask(ctx context.Context, in RunInput) (string, error) {
	env := make([]types.KeyValuePair, len(in.Env))
	for i, v := range in.Env {
		env[i] = types.KeyValuePair{Name: aws.String(v.Name), Value: aws.String(v.Value)}
	}
	req := &ecs.RunTaskInput{
		Cluster:        aws.String(in.Cluster),
		TaskDefinition: aws.String(in.TaskDefinition),
		Count:          aws.Int32(1),
		LaunchType:     types.LaunchType(in.LaunchType),
		StartedBy:      aws.String(StartedBy),
		Overrides: &types.TaskOverride{ContainerOverrides: []types.ContainerOverride{
			{Name: aws.String(in.Container), Environment: env},
		}},
	}
	if req.LaunchType == "" {
		req.LaunchType = types.LaunchTypeFargate
	}
	if in.ClientToken != "" {
		req.ClientToken = aws.String(in.ClientToken)
	}
	if len(in.Subnets) > 0 || len(in.SecurityGroups) > 0 {
		// awsvpc networking (Fargate's only mode); an EC2 task definition
		// in bridge or host mode takes none.
		req.NetworkConfiguration = &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{
			Subnets: in.Subnets, SecurityGroups: in.SecurityGroups,
		}}
	}
	out, err := c.API.RunTask(ctx, req)
	if err != nil {
		return "", fmt.Errorf("ecs run task %s on %s: %w", in.TaskDefinition, in.Cluster, err)
	}
	if len(out.Failures) > 0 {
		f := out.Failures[0]
		return "", fmt.Errorf("ecs run task %s on %s: %w: %s", in.TaskDefinition, in.Cluster, ErrRefused, failureText(f))
	}
	if len(out.Tasks) == 0 || aws.ToString(out.Tasks[0].TaskArn) == "" {
		return "", fmt.Errorf("ecs run task %s on %s: %w: the answer names no task", in.TaskDefinition, in.Cluster, ErrRefused)
	}
	return aws.ToString(out.Tasks[0].TaskArn), nil
}

// DescribeTask describes one task; ECS's failure MISSING is a Missing task.
func (c Client) DescribeTask(ctx context.Context, cluster, arn string) (Task, error) {
	out, err := c.API.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: []string{arn}})
	if err != nil {
		return Task{}, fmt.Errorf("ecs describe task %s: %w", arn, err)
	}
	for _, t := range out.Tasks {
		if aws.ToString(t.TaskArn) == arn {
			return taskOf(t), nil
		}
	}
	for _, f := range out.Failures {
		if aws.ToString(f.Reason) == "MISSING" {
			return Task{ARN: arn, Missing: true}, nil
		}
		return Task{}, fmt.Errorf("ecs describe task %s: %s", arn, failureText(f))
	}
	return Task{ARN: arn, Missing: true}, nil
}

// StopTask asks ECS to stop a task.
func (c Client) StopTask(ctx context.Context, cluster, arn, reason string) error {
	_, err := c.API.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(arn), Reason: aws.String(clip(reason, 255))})
	if err != nil {
		return fmt.Errorf("ecs stop task %s: %w", arn, err)
	}
	return nil
}

func taskOf(t types.Task) Task {
	out := Task{
		ARN: aws.ToString(t.TaskArn), LastStatus: aws.ToString(t.LastStatus),
		StopCode: string(t.StopCode), StoppedReason: aws.ToString(t.StoppedReason),
	}
	for _, c := range t.Containers {
		ct := Container{Name: aws.ToString(c.Name), Reason: aws.ToString(c.Reason)}
		if c.ExitCode != nil {
			code := int(*c.ExitCode)
			ct.ExitCode = &code
		}
		out.Containers = append(out.Containers, ct)
	}
	return out
}

func failureText(f types.Failure) string {
	parts := []string{aws.ToString(f.Reason)}
	if d := aws.ToString(f.Detail); d != "" {
		parts = append(parts, d)
	}
	if a := aws.ToString(f.Arn); a != "" {
		parts = append(parts, "("+a+")")
	}
	return strings.Join(parts, " ")
}

// clip keeps at most the first n bytes of s, cutting no character.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
