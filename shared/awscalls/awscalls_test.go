package awscalls

import (
	"reflect"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Each operation is named as IAM authorizes it: a transaction item by item,
// a batch send as SendMessage, RunTask on its family, an index query on the
// index; anything unknown stays visibly unknown.
func TestRecordNamesCallsAsIAMDoes(t *testing.T) {
	t.Parallel()
	r := &Recorder{Names: Names{Table: "rl", Bus: "bus", Queues: map[string]string{"http://q/pool": "queue/pool", "http://q/delay": "queue/delay"}}}
	for _, in := range []any{
		&dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String("rl")}},
			{ConditionCheck: &types.ConditionCheck{TableName: aws.String("rl")}},
		}},
		&dynamodb.QueryInput{TableName: aws.String("rl"), IndexName: aws.String("live")},
		&dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{"rl": {}}},
		&dynamodb.GetItemInput{TableName: aws.String("other")},
		&sqs.SendMessageBatchInput{QueueUrl: aws.String("http://q/pool")},
		&sqs.SendMessageInput{QueueUrl: aws.String("http://q/delay")},
		&ecs.RunTaskInput{TaskDefinition: aws.String("etl:7"), Cluster: aws.String("batch")},
		&ecs.StopTaskInput{Cluster: aws.String("batch")},
		&eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{EventBusName: aws.String("bus")}}},
		&lambda.InvokeInput{FunctionName: aws.String("etl"), Qualifier: aws.String("live")},
		&sqs.CreateQueueInput{},
	} {
		r.record("Op", in)
	}
	want := []Call{
		{"dynamodb:BatchGetItem", "table"},
		{"dynamodb:ConditionCheckItem", "table"},
		{"dynamodb:GetItem", "unknown table other"},
		{"dynamodb:PutItem", "table"},
		{"dynamodb:Query", "table/index/live"},
		{"ecs:RunTask", "ecs:task-definition/etl"},
		{"ecs:StopTask", "ecs:task/batch/*"},
		{"events:PutEvents", "bus"},
		{"lambda:InvokeFunction", "lambda:etl:live"},
		{"sqs:SendMessage", "queue/delay"},
		{"sqs:SendMessage", "queue/pool"},
		{"unknown:Op", "*sqs.CreateQueueInput"},
	}
	if got := r.Calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls\n got %v\nwant %v", got, want)
	}
}
