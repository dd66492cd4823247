package emulator_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
)

// isolate hides the developer's AWS settings: these tests are about
// starting the emulators, so no endpoint may be configured unless a test
// sets one.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
}

func start(t *testing.T) *emulator.Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := emulator.Start(ctx, emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	return env
}

func TestStartCallStop(t *testing.T) {
	isolate(t)
	env := start(t)
	ctx := t.Context()

	if env.Region() != emulator.DefaultRegion {
		t.Errorf("region = %q, want %q", env.Region(), emulator.DefaultRegion)
	}
	eps := []emulator.Endpoint{env.DynamoDB(), env.SQS()}
	for _, ep := range eps {
		if !ep.Started || ep.PID <= 0 || !strings.HasPrefix(ep.URL, "http://127.0.0.1:") {
			t.Fatalf("%s endpoint = %+v, want a started emulator on 127.0.0.1", ep.Service, ep)
		}
		if !emulator.Alive(ep.PID) {
			t.Fatalf("%s pid %d not alive after Start", ep.Service, ep.PID)
		}
		pgid, err := syscall.Getpgid(ep.PID)
		if err != nil || pgid != ep.PID {
			t.Errorf("%s: process group = %d (%v), want its own group %d", ep.Service, pgid, err, ep.PID)
		}
		t.Logf("%s ready in %s at %s (pid %d)", ep.Service, ep.StartupTime.Round(time.Millisecond), ep.URL, ep.PID)
		// Nothing may be reachable from the network: DynamoDB Local's own
		// main listens on every interface.
		emulatortest.AssertLoopbackOnly(t, ep.PID)
	}

	// A real round trip through each.
	ddb := env.DynamoDBClient()
	table := "emulator-test"
	_, err := ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatalf("create table: %v", err)
	}
	item := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k1"}}
	if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatalf("put item: %v", err)
	}
	// A failed condition is a 400 without a checksum header: the client
	// must surface the typed error, not a checksum mismatch.
	_, err = ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item,
		ConditionExpression: aws.String("attribute_not_exists(pk)")})
	var ccf *ddbtypes.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("conditional put on existing item: err = %v, want ConditionalCheckFailedException", err)
	}
	got, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: item, ConsistentRead: aws.Bool(true)})
	if err != nil || got.Item == nil {
		t.Fatalf("get item: %v, item %v", err, got)
	}

	q := env.SQSClient()
	created, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("emulator-test")})
	if err != nil {
		t.Fatalf("create queue: %v", err)
	}
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: created.QueueUrl, MessageBody: aws.String("hello")}); err != nil {
		t.Fatalf("send: %v", err)
	}
	recv, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: created.QueueUrl, WaitTimeSeconds: 5})
	if err != nil || len(recv.Messages) != 1 || aws.ToString(recv.Messages[0].Body) != "hello" {
		t.Fatalf("receive: %v, %+v", err, recv)
	}

	if err := env.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, ep := range eps {
		if emulator.Alive(ep.PID) {
			t.Errorf("%s pid %d alive after Stop", ep.Service, ep.PID)
		}
		if err := syscall.Kill(-ep.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s process group %d: kill(0) = %v, want ESRCH", ep.Service, ep.PID, err)
		}
	}
	if err := env.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestConfiguredSQSEndpointStartsNoSQS(t *testing.T) {
	isolate(t)
	other := start(t) // stands in for LocalStack or another account
	before := childrenRunning(t, "fauxqs")
	if len(before) != 1 {
		t.Fatalf("fauxqs children before = %v, want exactly the other env's", before)
	}

	t.Setenv("AWS_ENDPOINT_URL_SQS", other.SQS().URL)
	// With a configured endpoint the SDK's usual credential chain applies.
	t.Setenv("AWS_ACCESS_KEY_ID", "configured")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "configured")
	env := start(t)

	if ep := env.SQS(); ep.Started || ep.PID != 0 || ep.URL != other.SQS().URL {
		t.Errorf("sqs endpoint = %+v, want the configured %s, not started", ep, other.SQS().URL)
	}
	if ep := env.DynamoDB(); !ep.Started || ep.PID == 0 || ep.PID == other.DynamoDB().PID {
		t.Errorf("dynamodb endpoint = %+v, want a newly started emulator", ep)
	}
	if after := childrenRunning(t, "fauxqs"); len(after) != 1 || after[0] != before[0] {
		t.Errorf("fauxqs children after = %v, want only %v", after, before)
	}

	// The client goes where the setting points: a queue created through
	// it is visible through the other env.
	ctx := t.Context()
	if _, err := env.SQSClient().CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("configured-endpoint")}); err != nil {
		t.Fatalf("create queue via configured endpoint: %v", err)
	}
	if _, err := other.SQSClient().GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("configured-endpoint")}); err != nil {
		t.Fatalf("queue not found at the configured endpoint: %v", err)
	}
	if _, err := env.DynamoDBClient().ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("list tables on the started DynamoDB Local: %v", err)
	}
}

// childrenRunning lists live child processes of this test binary whose
// command line contains substr. It asks ps, so it works without /proc.
func childrenRunning(t *testing.T, substr string) []int {
	t.Helper()
	out, err := exec.Command("ps", "-A", "-ww", "-o", "pid=", "-o", "ppid=", "-o", "args=").Output()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[1] != strconv.Itoa(os.Getpid()) || !strings.Contains(strings.Join(fields[2:], " "), substr) {
			continue
		}
		if pid, err := strconv.Atoi(fields[0]); err == nil && emulator.Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestServicesSubset(t *testing.T) {
	isolate(t)
	javaBefore := childrenRunning(t, "DynamoDBLocal.jar")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	env, err := emulator.Start(ctx, emulator.Options{Services: []string{emulator.ServiceSQS}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	if ep := env.DynamoDB(); ep.Started || ep.URL != "" || ep.PID != 0 {
		t.Errorf("dynamodb endpoint = %+v, want none", ep)
	}
	if after := childrenRunning(t, "DynamoDBLocal.jar"); len(after) != len(javaBefore) {
		t.Errorf("DynamoDB Local children %v -> %v, want none started", javaBefore, after)
	}
	if _, err := env.SQSClient().ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
		t.Fatalf("sqs: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("DynamoDBClient on an SQS-only Env did not panic")
		}
	}()
	env.DynamoDBClient()
}

// BenchmarkStartStop measures how long each emulator takes from spawn to
// its first answered health check. Run with -benchtime=5x; the medians are
// reported as dynamodb-ms and sqs-ms.
func BenchmarkStartStop(b *testing.B) {
	var ddb, sq []time.Duration
	for b.Loop() {
		env, err := emulator.Start(b.Context(), emulator.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ddb = append(ddb, env.DynamoDB().StartupTime)
		sq = append(sq, env.SQS().StartupTime)
		if err := env.Stop(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(median(ddb).Milliseconds()), "dynamodb-ms")
	b.ReportMetric(float64(median(sq).Milliseconds()), "sqs-ms")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
