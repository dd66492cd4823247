package local_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/queue"
)

// Clients built with the counting options count each request they send,
// by operation.
func TestCountersCountSDKRequests(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	counters := local.NewCounters()
	client := newClient(counters)
	send(t, client, q.URL, "one", nil)
	send(t, client, q.URL, "two", nil)
	if _, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{MaxMessages: 10, VisibilityTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Counts(t.Context(), q.URL); err != nil {
		t.Fatal(err)
	}
	db := env.DynamoDBClient(counters.CountDynamoDB)
	if _, err := db.ListTables(t.Context(), &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	snap := counters.Snapshot()
	if want := map[string]int64{"SendMessage": 2, "ReceiveMessage": 1, "GetQueueAttributes": 1}; !reflect.DeepEqual(snap.SQS, want) {
		t.Errorf("SQS requests %v, want %v", snap.SQS, want)
	}
	if want := map[string]int64{"ListTables": 1}; !reflect.DeepEqual(snap.DynamoDB, want) {
		t.Errorf("DynamoDB requests %v, want %v", snap.DynamoDB, want)
	}
	if snap.SQSRequests() != 4 || snap.DynamoDBRequests() != 1 {
		t.Errorf("totals %d SQS, %d DynamoDB", snap.SQSRequests(), snap.DynamoDBRequests())
	}
}

// Every attempt is a request: a retried call counts once per try.
func TestCountersCountRetryAttempts(t *testing.T) {
	t.Parallel()
	counters := local.NewCounters()
	// Nothing listens on port 1: each attempt fails to connect and is retried.
	api := env.SQSClient(counters.CountSQS, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String("http://127.0.0.1:1")
		o.Retryer = retry.AddWithMaxBackoffDelay(retry.NewStandard(func(so *retry.StandardOptions) { so.MaxAttempts = 3 }), time.Millisecond)
	})
	if _, err := queue.New(api).Receive(t.Context(), "http://127.0.0.1:1/000000000000/none", queue.ReceiveOptions{}); err == nil {
		t.Fatal("receive from a closed port succeeded")
	}
	if got := counters.Snapshot().SQS; !reflect.DeepEqual(got, map[string]int64{"ReceiveMessage": 3}) {
		t.Errorf("SQS requests %v, want 3 attempts of ReceiveMessage", got)
	}
}
