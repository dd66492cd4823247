package scheduler

import (
	"maps"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/runledger/runledger/shared/tableschema"
)

// The actions below are the data calls the store and queue adapters make
// (shared/store, shared/queue), named one by one: no wildcard action appears
// anywhere in the stack (a test scans the synthesized template). Table
// management (CreateTable, UpdateTimeToLive, DescribeTable) belongs to the
// local stack and the tests; here the stack owns the table. TransactWriteItems
// has no IAM action of its own: DynamoDB checks PutItem, UpdateItem,
// DeleteItem or ConditionCheckItem for each item of the transaction.
var (
	dynamoItems = []string{
		"dynamodb:GetItem",
		"dynamodb:BatchGetItem",
		"dynamodb:Query",
		"dynamodb:PutItem",
		"dynamodb:UpdateItem",
		"dynamodb:DeleteItem",
		"dynamodb:ConditionCheckItem",
	}
	dynamoIndexQuery = []string{"dynamodb:Query"}
	// SendMessageBatch is authorized by sqs:SendMessage.
	sqsSend = []string{"sqs:SendMessage"}
	// The scheduler's notices go to the stack's own bus only.
	eventsPut = []string{"events:PutEvents"}
)

// tableAccess is what one function does with the table and which queues it
// sends to. Receiving is granted by the SQS event sources (consume).
type tableAccess struct {
	items   bool
	indexes []string
	sendTo  []string // "pools", "events", "delay"
	// publish: the function may put notices on the stack's event bus.
	publish bool
}

// accessByFunction is the least-privilege table: change it together with the
// adapters' calls.
//   - api: jobs and runs CRUD, the listing index for newest-first and by-name
//     listings; triggering a run dispatches at once (pools), a delayed timer
//     goes to the delay queue, a completion may be forwarded to events.
//   - events: applies completions, dispatches downstream tasks at once;
//     starts the runs of trigger events from the trigger queue, listing the jobs
//     (the listing index) to match them.
//   - ticker, reconciler: the timers index finds due work; both dispatch and
//     arm short delayed timers.
//   - every function that moves runs on (all but the worker): the live
//     index finds a job's unfinished runs (overlap policies, DELETE of a
//     job, waking the runs that wait on a finished run).
//   - every function that applies transitions (all but the worker)
//     publishes the notices they raise to the stack's bus.
//   - worker: talks to the API over HTTP and reports completions to the
//     events queue; it never touches the table.
var accessByFunction = map[string]tableAccess{
	FunctionAPI:        {items: true, indexes: []string{tableschema.ListIndex, tableschema.LiveIndex}, sendTo: []string{"pools", "delay", "events"}, publish: true},
	FunctionEvents:     {items: true, indexes: []string{tableschema.LiveIndex, tableschema.ListIndex}, sendTo: []string{"pools", "delay"}, publish: true},
	FunctionTicker:     {items: true, indexes: []string{tableschema.TimerIndex, tableschema.LiveIndex}, sendTo: []string{"pools", "delay"}, publish: true},
	FunctionReconciler: {items: true, indexes: []string{tableschema.TimerIndex, tableschema.LiveIndex}, sendTo: []string{"pools", "delay"}, publish: true},
	FunctionWorker:     {sendTo: []string{"events"}},
}

// queriedIndexes are the indexes a function may query: the ones it reads
// and, with the retired indexes kept, each retired index one of them
// replaced, so that the code still running from before the deploy keeps
// its reads until CloudFormation replaces it.
func queriedIndexes(reads []string, keepRetired bool) []string {
	out := append([]string{}, reads...)
	if !keepRetired {
		return out
	}
	sc := tableschema.Table()
	for _, ix := range sc.Indexes {
		if ix.Replaces == sc.Migrating().Name && slices.Contains(reads, ix.Name) {
			out = append(out, ix.Replaces)
		}
	}
	return out
}

func (s *Scheduler) grantAccess(p Props) {
	for _, name := range FunctionNames() {
		fn, ok := s.Functions[name]
		if !ok {
			continue
		}
		a := accessByFunction[name]
		role := fn.Role()
		if a.items {
			role.AddToPrincipalPolicy(allow(dynamoItems, s.Table.TableArn()))
		}
		if len(a.indexes) > 0 {
			var arns []*string
			for _, ix := range queriedIndexes(a.indexes, p.KeepRetiredIndexes) {
				arns = append(arns, awscdk.Fn_Join(jsii.String(""), &[]*string{s.Table.TableArn(), jsii.String("/index/" + ix)}))
			}
			role.AddToPrincipalPolicy(allow(dynamoIndexQuery, arns...))
		}
		var queues []*string
		for _, target := range a.sendTo {
			switch target {
			case "pools":
				for _, pool := range sortedKeys(s.PoolQueues) {
					queues = append(queues, s.PoolQueues[pool].Queue.QueueArn())
				}
			case "events":
				queues = append(queues, s.EventsQueue.Queue.QueueArn())
			case "delay":
				queues = append(queues, s.DelayQueue.Queue.QueueArn())
			}
		}
		if len(queues) > 0 {
			role.AddToPrincipalPolicy(allow(sqsSend, queues...))
		}
		if a.publish {
			role.AddToPrincipalPolicy(allow(eventsPut, s.EventBus.EventBusArn()))
		}
	}
}

func allow(actions []string, resources ...*string) awsiam.PolicyStatement {
	return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Effect:    awsiam.Effect_ALLOW,
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	})
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// GrantFencedCommit lets grantee (a worker's role) put its attempts'
// fences into its own TransactWriteItems: dynamodb:ConditionCheckItem on
// the ledger's table and nothing else. A ConditionCheck reads the item it
// names and writes nothing, so the grant lets a worker learn whether an
// attempt owns its task, never change the ledger (docs/workers.md,
// "Exactly-once effects").
func (s *Scheduler) GrantFencedCommit(grantee awsiam.IGrantable) awsiam.Grant {
	return awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings("dynamodb:ConditionCheckItem"),
		ResourceArns: &[]*string{s.Table.TableArn()},
	})
}
