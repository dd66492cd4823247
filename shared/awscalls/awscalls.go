// Package awscalls records the AWS calls SDK clients make, as IAM sees
// them: the action ("dynamodb:PutItem") and the resource it acts on, named
// by what it is to the deployment ("table", "table/index/live",
// "queue/events", "bus", "ecs:task/batch/*"), so that a test can compare
// what a function calls with what its role allows.
package awscalls

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// Call is one IAM action on one resource.
type Call struct {
	Action   string `json:"action"`
	Resource string `json:"resource"`
}

// Names says what the deployment's resources are called, so the recorder
// can name them by their part: Queues maps a queue URL to its part
// ("queue/pool", "queue/events", "queue/delay").
type Names struct {
	Table  string
	Bus    string
	Queues map[string]string
}

// Recorder collects the distinct calls of the clients it is added to
// (Add, as an APIOptions entry). It is safe for concurrent use.
type Recorder struct {
	Names Names

	mu    sync.Mutex
	calls map[Call]bool
}

// Add installs the recorder on a client's middleware stack.
func (r *Recorder) Add(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("awscalls.Recorder",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			r.record(awsmiddleware.GetOperationName(ctx), in.Parameters)
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// Calls lists the recorded calls, sorted.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Call, 0, len(r.calls))
	for c := range r.calls {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Call) int { return strings.Compare(a.Action+" "+a.Resource, b.Action+" "+b.Resource) })
	return out
}

func (r *Recorder) add(action, resource string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[Call]bool{}
	}
	r.calls[Call{action, resource}] = true
}

// record names the IAM action and resource of one operation's input.
// TransactWriteItems and the batch writes are authorized item by item,
// SendMessageBatch as SendMessage, Invoke as InvokeFunction.
func (r *Recorder) record(op string, params any) {
	switch in := params.(type) {
	// DynamoDB
	case *dynamodb.GetItemInput:
		r.add("dynamodb:GetItem", r.table(in.TableName, nil))
	case *dynamodb.PutItemInput:
		r.add("dynamodb:PutItem", r.table(in.TableName, nil))
	case *dynamodb.UpdateItemInput:
		r.add("dynamodb:UpdateItem", r.table(in.TableName, nil))
	case *dynamodb.DeleteItemInput:
		r.add("dynamodb:DeleteItem", r.table(in.TableName, nil))
	case *dynamodb.QueryInput:
		r.add("dynamodb:Query", r.table(in.TableName, in.IndexName))
	case *dynamodb.ScanInput:
		r.add("dynamodb:Scan", r.table(in.TableName, in.IndexName))
	case *dynamodb.BatchGetItemInput:
		for name := range in.RequestItems {
			r.add("dynamodb:BatchGetItem", r.table(&name, nil))
		}
	case *dynamodb.BatchWriteItemInput:
		for name, reqs := range in.RequestItems {
			for _, w := range reqs {
				if w.PutRequest != nil {
					r.add("dynamodb:PutItem", r.table(&name, nil))
				}
				if w.DeleteRequest != nil {
					r.add("dynamodb:DeleteItem", r.table(&name, nil))
				}
			}
		}
	case *dynamodb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				r.add("dynamodb:PutItem", r.table(it.Put.TableName, nil))
			case it.Update != nil:
				r.add("dynamodb:UpdateItem", r.table(it.Update.TableName, nil))
			case it.Delete != nil:
				r.add("dynamodb:DeleteItem", r.table(it.Delete.TableName, nil))
			case it.ConditionCheck != nil:
				r.add("dynamodb:ConditionCheckItem", r.table(it.ConditionCheck.TableName, nil))
			}
		}
	case *dynamodb.TransactGetItemsInput:
		for _, it := range in.TransactItems {
			if it.Get != nil {
				r.add("dynamodb:GetItem", r.table(it.Get.TableName, nil))
			}
		}
	// SQS
	case *sqs.SendMessageInput:
		r.add("sqs:SendMessage", r.queue(in.QueueUrl))
	case *sqs.SendMessageBatchInput:
		r.add("sqs:SendMessage", r.queue(in.QueueUrl))
	case *sqs.ReceiveMessageInput:
		r.add("sqs:ReceiveMessage", r.queue(in.QueueUrl))
	case *sqs.DeleteMessageInput:
		r.add("sqs:DeleteMessage", r.queue(in.QueueUrl))
	case *sqs.DeleteMessageBatchInput:
		r.add("sqs:DeleteMessage", r.queue(in.QueueUrl))
	case *sqs.ChangeMessageVisibilityInput:
		r.add("sqs:ChangeMessageVisibility", r.queue(in.QueueUrl))
	case *sqs.ChangeMessageVisibilityBatchInput:
		r.add("sqs:ChangeMessageVisibility", r.queue(in.QueueUrl))
	case *sqs.GetQueueAttributesInput:
		r.add("sqs:GetQueueAttributes", r.queue(in.QueueUrl))
	// ECS: RunTask is authorized on the task definition (the cluster is a
	// condition), DescribeTasks and StopTask on the cluster's tasks.
	case *ecs.RunTaskInput:
		family, _, _ := strings.Cut(deref(in.TaskDefinition), ":")
		r.add("ecs:RunTask", "ecs:task-definition/"+family)
	case *ecs.DescribeTasksInput:
		r.add("ecs:DescribeTasks", "ecs:task/"+deref(in.Cluster)+"/*")
	case *ecs.StopTaskInput:
		r.add("ecs:StopTask", "ecs:task/"+deref(in.Cluster)+"/*")
	// EventBridge
	case *eventbridge.PutEventsInput:
		for _, e := range in.Entries {
			bus := "unknown bus " + deref(e.EventBusName)
			if deref(e.EventBusName) == r.Names.Bus {
				bus = "bus"
			}
			r.add("events:PutEvents", bus)
		}
	// Lambda
	case *lambda.InvokeInput:
		name := deref(in.FunctionName)
		if q := deref(in.Qualifier); q != "" {
			name += ":" + q
		}
		r.add("lambda:InvokeFunction", "lambda:"+name)
	default:
		r.add(fmt.Sprintf("unknown:%s", op), fmt.Sprintf("%T", params))
	}
}

func (r *Recorder) table(name, index *string) string {
	if deref(name) != r.Names.Table {
		return "unknown table " + deref(name)
	}
	if deref(index) != "" {
		return "table/index/" + deref(index)
	}
	return "table"
}

func (r *Recorder) queue(url *string) string {
	if part, ok := r.Names.Queues[deref(url)]; ok {
		return part
	}
	return "unknown queue " + deref(url)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
