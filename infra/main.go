// Command infra is the runledger CDK app: one stack holding the scheduler
// construct, its outputs and, optionally, an alarm topic. cdk.json at the
// repository root runs it (`npx cdk synth`, `npx cdk deploy`); configure it
// with context keys (see config.go and docs/deploy.md).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/runledger/runledger/infra/scheduler"
)

func main() {
	if err := run(); err != nil {
		jsii.Close()
		fmt.Fprintln(os.Stderr, "runledger infra:", err)
		os.Exit(1)
	}
	jsii.Close()
}

func run() error {
	base, ctx, err := projectFile()
	if err != nil {
		return err
	}
	// CDK_OUTDIR comes from the environment; app.sh makes it absolute.
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	cfg, err := readConfig(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return err
	}
	if cfg.Props.CodeDir, err = filepath.Abs(resolve(base, cfg.Props.CodeDir)); err != nil {
		return fmt.Errorf("code dir: %w", err)
	}
	if err := cfg.Props.Validate(); err != nil {
		return err
	}
	newStack(app, cfg)
	app.Synth(nil)
	return nil
}

// newStack is the deployed stack: the scheduler and outputs with stable
// names, for `cdk deploy --outputs-file` and scripts.
func newStack(scope constructs.Construct, cfg config) (awscdk.Stack, *scheduler.Scheduler) {
	stack := awscdk.NewStack(scope, jsii.String(cfg.StackName), &awscdk.StackProps{
		Description: jsii.String("runledger: serverless job and workflow scheduler"),
	})
	props := cfg.Props
	switch {
	case cfg.AlarmTopicArn != "":
		props.AlarmTopic = awssns.Topic_FromTopicArn(stack, jsii.String("AlarmTopic"), jsii.String(cfg.AlarmTopicArn))
	case cfg.AlarmEmail != "":
		topic := awssns.NewTopic(stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
			DisplayName: jsii.String("runledger alarms"),
			// A topic policy denies sns:Publish over plain HTTP.
			EnforceSSL: jsii.Bool(true),
		})
		topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
		props.AlarmTopic = topic
	}
	s := scheduler.NewScheduler(stack, jsii.String("Scheduler"), &props)

	output := func(id, description string, value *string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{
			Description: jsii.String(description),
			Value:       value,
		})
	}
	output("ApiUrl", "Base URL of the HTTP API (append /v1/...)", s.API.ApiEndpoint())
	output("Region", "Region of the stack (SigV4 signing region)", awscdk.Aws_REGION())
	output("ExecuteApiArn", "Resource for execute-api:Invoke in callers' IAM policies",
		s.API.ArnForExecuteApi(jsii.String("*"), jsii.String("/v1/*"), jsii.String("$default")))
	output("TableName", "DynamoDB table (RUNLEDGER_TABLE)", s.Table.TableName())
	output("TableArn", "DynamoDB table: a worker's role needs dynamodb:ConditionCheckItem on it, and nothing else, for fenced commits",
		s.Table.TableArn())
	output("EventsQueueUrl", "Worker completion events (RUNLEDGER_EVENTS_QUEUE_URL)", s.EventsQueue.Queue.QueueUrl())
	output("EventsQueueArn", "Events queue: a lambda executor's function's on-failure destination (its role needs sqs:SendMessage on it)",
		s.EventsQueue.Queue.QueueArn())
	output("DelayQueueUrl", "Delayed timers (RUNLEDGER_DELAY_QUEUE_URL)", s.DelayQueue.Queue.QueueUrl())
	output("PoolQueueUrls", "Dispatch queue per worker pool, JSON (RUNLEDGER_POOL_QUEUES)", s.PoolQueuesJSON())
	output("DeadLetterQueueUrls", "Dead-letter queue per queue, JSON", s.DeadLetterQueuesJSON())
	output("DashboardName", "CloudWatch dashboard", s.Dashboard.DashboardName())
	output("EventBusName", "EventBridge bus of the scheduler's notices (RUNLEDGER_EVENT_BUS)", s.EventBus.EventBusName())
	return stack, s
}
