// Package scheduler is the runledger CDK construct: the table, the queues,
// the five Lambda functions of docs/wiring.md, their schedules and event
// sources, the HTTP API, least-privilege roles, alarms and a dashboard.
// Drop it into any CDK app with NewScheduler.
package scheduler

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/runledger/runledger/shared/tableschema"
)

// QueuePair is a queue and the dead-letter queue its redrive policy feeds.
type QueuePair struct {
	Queue      awssqs.Queue
	DeadLetter awssqs.Queue
}

// Scheduler is the deployed runledger service. Its fields expose the parts
// a surrounding app may want to output, grant on or extend.
type Scheduler struct {
	// Construct is the scope holding everything below; add to it with
	// s.Construct as the scope. (Not embedded: jsii cannot take a Go struct
	// that embeds a construct as a scope.)
	Construct constructs.Construct

	Table awsdynamodb.Table
	// API is the HTTP API; API.ApiEndpoint() is the base URL.
	API awsapigatewayv2.HttpApi
	// AccessLogs holds the HTTP API's access log, one JSON line per request.
	AccessLogs awslogs.LogGroup
	// EventBus receives the scheduler's notices (docs/api.md, "Notices"):
	// source "runledger", detail-type the notice's type. Route them with
	// rules on it.
	EventBus    awsevents.EventBus
	EventsQueue QueuePair
	DelayQueue  QueuePair
	// TriggerQueue receives the events of Props.EventTriggers' rules;
	// nil without them.
	TriggerQueue *QueuePair
	// PoolQueues holds each worker pool's dispatch queue, by pool name.
	PoolQueues map[string]QueuePair
	// Functions holds the deployed functions by name (see FunctionNames);
	// the worker is present only with Props.ExampleWorkerPool.
	Functions map[string]awslambda.Function
	Alarms    []awscloudwatch.Alarm
	Dashboard awscloudwatch.Dashboard

	// env is each function's environment as set, and envSizes an upper
	// bound of each deploy-time value's length, by its token: what
	// checkEnvironments measures against Lambda's limit.
	env      map[string]map[string]*string
	envSizes map[string]int
}

// functionSpec sizes one function. The timeouts matter beyond the function:
// each consumed queue's visibility timeout is six times its consumer's.
type functionSpec struct {
	timeout     time.Duration
	memoryMiB   int
	description string
}

var functionSpecs = map[string]functionSpec{
	// The HTTP API integration gives up after 30 s; answer well before.
	FunctionAPI:        {20 * time.Second, 512, "runledger HTTP API (API Gateway HTTP API, payload 2.0)"},
	FunctionEvents:     {60 * time.Second, 256, "runledger events: worker completion events and delayed timers from SQS"},
	FunctionTicker:     {60 * time.Second, 256, "runledger ticker: cron slots and due timers"},
	FunctionReconciler: {60 * time.Second, 256, "runledger reconciler: lease expiry, queue and cancel timeouts, LOST resolution"},
	FunctionWorker:     {120 * time.Second, 256, "runledger example worker of one pool"},
}

// visibilityFactor follows AWS's advice for SQS event sources: a visibility
// timeout of at least six times the function timeout, so a batch the poller
// retries after throttling is not redelivered while it still runs.
const visibilityFactor = 6

// NewScheduler adds the runledger service to scope. It panics, as CDK
// constructs do, when props are invalid, naming every problem found.
func NewScheduler(scope constructs.Construct, id *string, props *Props) *Scheduler {
	var p Props
	if props != nil {
		p = *props
	}
	p = p.withDefaults()
	if err := p.validate(); err != nil {
		panic(fmt.Errorf("runledger scheduler %s: %w", *id, err))
	}
	stack := awscdk.Stack_Of(scope)
	if err := p.EventTriggers.checkBuses(knownAtSynth(stack.Account()), knownAtSynth(stack.Region())); err != nil {
		panic(fmt.Errorf("runledger scheduler %s: %w", *id, err))
	}

	s := &Scheduler{
		Construct:  constructs.NewConstruct(scope, id),
		PoolQueues: map[string]QueuePair{},
		Functions:  map[string]awslambda.Function{},
		env:        map[string]map[string]*string{},
		envSizes:   map[string]int{},
	}
	s.Table = s.newTable(p)
	s.EventBus = awsevents.NewEventBus(s.Construct, jsii.String("EventBus"), &awsevents.EventBusProps{
		Description: jsii.String("runledger events: runs ended, tasks failed or lost, deadlines missed"),
	})

	// Pool queues are read by workers, which may be the example worker
	// function or processes of the user's own; size them for the function.
	poolVisibility := visibilityFactor * functionSpecs[FunctionWorker].timeout
	eventsVisibility := visibilityFactor * functionSpecs[FunctionEvents].timeout
	for _, pool := range p.Pools {
		s.PoolQueues[pool] = s.newQueuePair(p, "PoolQueue-"+pool, poolVisibility)
	}
	s.EventsQueue = s.newQueuePair(p, "EventsQueue", eventsVisibility)
	s.DelayQueue = s.newQueuePair(p, "DelayQueue", eventsVisibility)

	poolsSize := 2
	for _, pool := range p.Pools {
		poolsSize += len(pool) + 6 + queueURLSize // ,"<pool>":"<url>"
	}
	poolJSON := s.envValue(s.PoolQueuesJSON(), poolsSize)
	retention := p.HistoryRetention.String()
	skew := p.MaxClockSkew.String()
	table := s.envValue(s.Table.TableName(), s.generatedName(255))
	events := s.envValue(s.EventsQueue.Queue.QueueUrl(), queueURLSize)
	delay := s.envValue(s.DelayQueue.Queue.QueueUrl(), queueURLSize)
	bus := s.envValue(s.EventBus.EventBusName(), s.generatedName(256))

	// Environment per docs/wiring.md.
	s.newFunction(p, FunctionAPI, map[string]*string{
		"RUNLEDGER_TABLE":             table,
		"RUNLEDGER_EVENTS_QUEUE_URL":  events,
		"RUNLEDGER_DELAY_QUEUE_URL":   delay,
		"RUNLEDGER_POOL_QUEUES":       poolJSON,
		"RUNLEDGER_HISTORY_RETENTION": &retention,
		"RUNLEDGER_MAX_CLOCK_SKEW":    &skew,
		"RUNLEDGER_EVENT_BUS":         bus,
		// API Gateway authorizes operator routes (IAM or JWT); the handler
		// still checks attempt tokens on the worker routes.
		"RUNLEDGER_AUTH": jsii.String("gateway"),
	})
	s.newFunction(p, FunctionEvents, map[string]*string{
		"RUNLEDGER_TABLE":             table,
		"RUNLEDGER_EVENTS_QUEUE_URL":  events,
		"RUNLEDGER_DELAY_QUEUE_URL":   delay,
		"RUNLEDGER_POOL_QUEUES":       poolJSON,
		"RUNLEDGER_HISTORY_RETENTION": &retention,
		"RUNLEDGER_MAX_CLOCK_SKEW":    &skew,
		"RUNLEDGER_EVENT_BUS":         bus,
	})
	tickerPeriod := p.TickerRate.String()
	for _, name := range []string{FunctionTicker, FunctionReconciler} {
		env := map[string]*string{
			"RUNLEDGER_TABLE":             table,
			"RUNLEDGER_DELAY_QUEUE_URL":   delay,
			"RUNLEDGER_POOL_QUEUES":       poolJSON,
			"RUNLEDGER_HISTORY_RETENTION": &retention,
			"RUNLEDGER_MAX_CLOCK_SKEW":    &skew,
			"RUNLEDGER_EVENT_BUS":         bus,
		}
		if name == FunctionTicker {
			// A slot the ticker first sees over two of its periods late
			// is missed and caught up by the job's policy.
			env["RUNLEDGER_TICKER_PERIOD"] = &tickerPeriod
		}
		s.newFunction(p, name, env)
	}

	s.API = s.newAPI(p, s.Functions[FunctionAPI])
	s.envValue(s.API.ApiEndpoint(), apiURLSize)

	if p.ExampleWorkerPool != "" {
		s.newFunction(p, FunctionWorker, map[string]*string{
			"RUNLEDGER_EVENTS_QUEUE_URL": events,
			"RUNLEDGER_POOL":             jsii.String(p.ExampleWorkerPool),
			"RUNLEDGER_API_URL":          s.API.ApiEndpoint(),
		})
		// One attempt per invocation: an attempt runs for as long as its
		// job does, and a batch would make later envelopes wait for it.
		s.consume(FunctionWorker, s.PoolQueues[p.ExampleWorkerPool].Queue, 1)
	}
	s.consume(FunctionEvents, s.EventsQueue.Queue, 10)
	s.consume(FunctionEvents, s.DelayQueue.Queue, 10)
	s.schedule(FunctionTicker, p.TickerRate)
	s.schedule(FunctionReconciler, p.ReconcilerRate)

	s.grantAccess(p)
	s.wireExecutorsAllowed(p)
	s.wireECS(p)
	s.wireLambda(p)
	s.wireTriggers(p)
	s.addAlarms(p)
	s.addDashboard()
	if err := s.checkEnvironments(p); err != nil {
		panic(fmt.Errorf("runledger scheduler %s: %w", *id, err))
	}
	return s
}

func (s *Scheduler) newTable(p Props) awsdynamodb.Table {
	schema := tableschema.Table()
	table := awsdynamodb.NewTable(s.Construct, jsii.String("Table"), &awsdynamodb.TableProps{
		PartitionKey: keyAttribute(schema.PartitionKey),
		SortKey:      keyAttribute(schema.SortKey),
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		TimeToLiveAttribute: jsii.String(schema.TTLAttribute),
		DeletionProtection:  p.DeletionProtection,
		RemovalPolicy:       p.RemovalPolicy,
	})
	for _, ix := range tableIndexes(p) {
		gsi := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:    jsii.String(ix.Name),
			PartitionKey: keyAttribute(ix.PartitionKey),
			SortKey:      keyAttribute(ix.SortKey),
		}
		switch ix.Projection {
		case tableschema.ProjectAll:
			gsi.ProjectionType = awsdynamodb.ProjectionType_ALL
		case tableschema.ProjectInclude:
			gsi.ProjectionType = awsdynamodb.ProjectionType_INCLUDE
			gsi.NonKeyAttributes = jsii.Strings(ix.NonKeyAttributes...)
		case tableschema.ProjectKeysOnly:
			gsi.ProjectionType = awsdynamodb.ProjectionType_KEYS_ONLY
		default:
			panic(fmt.Errorf("table schema index %s: unknown projection %q", ix.Name, ix.Projection))
		}
		table.AddGlobalSecondaryIndex(gsi)
	}
	return table
}

// tableIndexes are the table's indexes: the schema's, and with
// KeepRetiredIndexes the retired one of the newest migration.
func tableIndexes(p Props) []tableschema.Index {
	schema := tableschema.Table()
	indexes := schema.Indexes
	if p.KeepRetiredIndexes {
		indexes = append(append([]tableschema.Index{}, indexes...), schema.Migrating())
	}
	return indexes
}

// keyAttribute converts a schema attribute; an unset one (no sort key) is nil.
func keyAttribute(a tableschema.Attribute) *awsdynamodb.Attribute {
	if a.Name == "" {
		return nil
	}
	var t awsdynamodb.AttributeType
	switch a.Type {
	case tableschema.String:
		t = awsdynamodb.AttributeType_STRING
	case tableschema.Number:
		t = awsdynamodb.AttributeType_NUMBER
	default:
		panic(fmt.Errorf("table schema attribute %s: unknown type %q", a.Name, a.Type))
	}
	return &awsdynamodb.Attribute{Name: jsii.String(a.Name), Type: t}
}

func (s *Scheduler) newQueuePair(p Props, id string, visibility time.Duration) QueuePair {
	// EnforceSSL: a queue policy denies every request over plain HTTP.
	dlq := awssqs.NewQueue(s.Construct, jsii.String(id+"DeadLetter"), &awssqs.QueueProps{
		Encryption: awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL: jsii.Bool(true),
		// Longer than the source queue's retention, so nothing expires
		// between arriving in the DLQ and an operator redriving it.
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	q := awssqs.NewQueue(s.Construct, jsii.String(id), &awssqs.QueueProps{
		Encryption:             awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:             jsii.Bool(true),
		VisibilityTimeout:      seconds(visibility),
		ReceiveMessageWaitTime: awscdk.Duration_Seconds(jsii.Number(20)),
		RetentionPeriod:        awscdk.Duration_Days(jsii.Number(4)),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			MaxReceiveCount: jsii.Number(p.MaxReceiveCount),
			Queue:           dlq,
		},
	})
	return QueuePair{Queue: q, DeadLetter: dlq}
}

func (s *Scheduler) newFunction(p Props, name string, env map[string]*string) awslambda.Function {
	spec := functionSpecs[name]
	id := exportName(name) + "Function"
	logs := awslogs.NewLogGroup(s.Construct, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: p.RemovalPolicy,
	})
	// An explicit role, not CDK's default with the AWSLambdaBasicExecutionRole
	// managed policy: that one may write to any log group in the account.
	role := awsiam.NewRole(s.Construct, jsii.String(id+"Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("runledger " + name + " function"),
	})
	role.AddToPrincipalPolicy(allow([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, logs.LogGroupArn()))

	var reserved *float64
	if n, ok := p.ReservedConcurrency[name]; ok && n != Unreserved {
		reserved = jsii.Number(n)
	}
	fn := awslambda.NewFunction(s.Construct, jsii.String(id), &awslambda.FunctionProps{
		Description:                  jsii.String(spec.description),
		Runtime:                      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:                 awslambda.Architecture_ARM_64(),
		Handler:                      jsii.String("bootstrap"),
		Code:                         awslambda.Code_FromAsset(jsii.String(filepath.Join(p.CodeDir, name)), nil),
		Timeout:                      seconds(spec.timeout),
		MemorySize:                   jsii.Number(spec.memoryMiB),
		Environment:                  &env,
		Role:                         role,
		LogGroup:                     logs,
		ReservedConcurrentExecutions: reserved,
	})
	s.Functions[name] = fn
	s.env[name] = maps.Clone(env)
	return fn
}

// consume subscribes a function to a queue. ReportBatchItemFailures lets the
// handler return only the messages that failed transiently, so one bad
// message does not redeliver the whole batch.
func (s *Scheduler) consume(name string, q awssqs.IQueue, batchSize int) {
	s.Functions[name].AddEventSource(awslambdaeventsources.NewSqsEventSource(q, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(batchSize),
		ReportBatchItemFailures: jsii.Bool(true),
	}))
}

func (s *Scheduler) schedule(name string, rate time.Duration) {
	// A tick older than one period is superseded by the next one.
	maxAge := min(max(rate, time.Minute), 24*time.Hour)
	awsevents.NewRule(s.Construct, jsii.String(exportName(name)+"Schedule"), &awsevents.RuleProps{
		Description: jsii.String(fmt.Sprintf("runledger %s, every %s", name, rate)),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(rate.Minutes()))),
		Targets: &[]awsevents.IRuleTarget{
			awseventstargets.NewLambdaFunction(s.Functions[name], &awseventstargets.LambdaFunctionProps{
				RetryAttempts: jsii.Number(2),
				MaxEventAge:   seconds(maxAge),
			}),
		},
	})
}

// knownAtSynth is a stack attribute's value, or "" when it is a token
// that CloudFormation resolves at deploy time.
func knownAtSynth(v *string) string {
	if v == nil || *awscdk.Token_IsUnresolved(v) {
		return ""
	}
	return *v
}

func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}

// exportName turns a function name into a construct id prefix ("api" -> "Api").
func exportName(name string) string {
	if name == "" {
		return name
	}
	b := []byte(name)
	if b[0] >= 'a' && b[0] <= 'z' {
		b[0] -= 'a' - 'A'
	}
	return string(b)
}

// PoolQueuesJSON renders RUNLEDGER_POOL_QUEUES, {"<pool>": "<queue url>"}.
func (s *Scheduler) PoolQueuesJSON() *string {
	urls := map[string]*string{}
	for pool, q := range s.PoolQueues {
		urls[pool] = q.Queue.QueueUrl()
	}
	return urlMapJSON(urls)
}

// DeadLetterQueuesJSON renders {"pool <name>"|"events"|"delay": "<DLQ url>"}.
func (s *Scheduler) DeadLetterQueuesJSON() *string {
	urls := map[string]*string{}
	for _, q := range s.queues() {
		urls[q.label] = q.pair.DeadLetter.QueueUrl()
	}
	return urlMapJSON(urls)
}

// urlMapJSON renders a JSON object of queue URLs with sorted keys, so the
// template is the same on every synth. The URLs are deploy-time tokens,
// hence a join rather than json.Marshal.
func urlMapJSON(urls map[string]*string) *string {
	parts := []*string{jsii.String("{")}
	for i, name := range sortedKeys(urls) {
		key, _ := json.Marshal(name)
		sep := ""
		if i > 0 {
			sep = ","
		}
		parts = append(parts, jsii.String(sep+string(key)+`:"`), urls[name], jsii.String(`"`))
	}
	parts = append(parts, jsii.String("}"))
	return awscdk.Fn_Join(jsii.String(""), &parts)
}
