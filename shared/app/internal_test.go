package app

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/scheduler"
)

// Every Part's Metrics writer gets the scheduler's lines beside
// Config.Metrics; without one, the scheduler writes to Config.Metrics alone.
func TestMetricsReachEveryPart(t *testing.T) {
	t.Parallel()
	var main, a, b bytes.Buffer
	cfg := Config{Metrics: &main, Parts: []Part{{Name: "a", Metrics: &a}, {Name: "quiet"}, {Name: "b", Metrics: &b}}}
	if _, err := io.WriteString(cfg.metrics(), "{\"InstanceLost\":1}\n"); err != nil {
		t.Fatal(err)
	}
	for name, buf := range map[string]*bytes.Buffer{"config": &main, "a": &a, "b": &b} {
		if buf.String() != "{\"InstanceLost\":1}\n" {
			t.Errorf("%s got %q", name, buf)
		}
	}
	alone := Config{Metrics: &main, Parts: []Part{{Name: "quiet"}}}
	if alone.metrics() != io.Writer(&main) {
		t.Errorf("without part writers, metrics = %T, want Config.Metrics itself", alone.metrics())
	}
}

// The local stack creates the configured pools' queues, then the parts'
// pools not yet among them, each once and in order.
func TestProvisionedPools(t *testing.T) {
	t.Parallel()
	got := provisionedPools([]string{"default", "demo"}, []Part{
		{Name: "demo worker", Pools: []string{"demo"}}, {Name: "exec", Pools: []string{"shell", "default", "shell"}},
	})
	if want := []string{"default", "demo", "shell"}; !reflect.DeepEqual(got, want) {
		t.Errorf("pools = %v, want %v", got, want)
	}
}

func TestLambdaWorkerName(t *testing.T) {
	t.Parallel()
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "rl-worker", "AWS_LAMBDA_LOG_STREAM_NAME": "2026/01/02/[$LATEST]0123abcd"}, "rl-worker/0123abcd"},
		{map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "rl-worker"}, "rl-worker"},
	} {
		if got := lambdaWorkerName("gpu", env(tc.env)); got != tc.want {
			t.Errorf("%v: name %q, want %q", tc.env, got, tc.want)
		}
	}
}

// A Lambda entry has an ecs executor only when the deployment allows ECS
// task definitions, and then it needs the API's URL for the containers.
func TestAWSECS(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	none, err := awsECS(aws.Config{}, jobspec.Allowed{LambdaFunctions: []string{"fn"}}, env(nil))
	if err != nil || len(none) != 0 {
		t.Fatalf("without ECS allowed: %v %v, want none", none, err)
	}
	allowed := jobspec.Allowed{ECSClusters: []string{"batch"}, ECSTaskDefinitions: []string{"etl"}}
	if _, err := awsECS(aws.Config{}, allowed, env(nil)); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "RUNLEDGER_API_URL") {
		t.Fatalf("without RUNLEDGER_API_URL: %v, want a configuration error naming it", err)
	}
	got, err := awsECS(aws.Config{Region: "eu-west-1"}, allowed, env(map[string]string{"RUNLEDGER_API_URL": "https://api"}))
	if err != nil || len(got) != 1 || got[0].Type() != jobspec.ExecutorECS {
		t.Fatalf("with ECS allowed: %v %v, want the ecs executor", got, err)
	}
}

// The events function hands the service each SQS record as a message (its
// id, its queue and its body, in order) and answers the ids the service
// hands back, and only those, as the batch's item failures.
func TestEventsFunctionSpeaksSQS(t *testing.T) {
	t.Parallel()
	ev := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m-1", EventSourceARN: "arn:aws:sqs:eu-west-1:1:rl-events", Body: `{"a":1}`},
		{MessageId: "m-2", Body: "b"},
	}}
	want := []scheduler.QueueMessage{{ID: "m-1", QueueARN: "arn:aws:sqs:eu-west-1:1:rl-events", Body: `{"a":1}`}, {ID: "m-2", Body: "b"}}
	if got := sqsMessages(ev); !reflect.DeepEqual(got, want) {
		t.Errorf("messages %+v, want %+v", got, want)
	}
	resp := batchItemFailures([]string{"m-2"})
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != "m-2" {
		t.Errorf("answered %+v, want m-2 alone redelivered", resp)
	}
	if resp := batchItemFailures(nil); len(resp.BatchItemFailures) != 0 {
		t.Errorf("answered %+v for a batch all handled", resp)
	}
}
