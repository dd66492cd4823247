package local

import (
	"context"
	"maps"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// Counters tallies what the local stack would be billed for on AWS: Lambda
// invocations (and their duration) per function name, API Gateway requests,
// and AWS API requests per service and operation. It is safe for concurrent
// use. A nil *Counters counts nothing, so every adapter works without one.
//
// Where each figure is counted:
//   - Invocations: by the adapters (Poller, Ticker, Server), once per call
//     of the handler, under the adapter's Name.
//   - API requests: by Server, once per HTTP request it accepts, whether or
//     not the request reaches the handler (API Gateway bills those too).
//   - SQS and DynamoDB requests: at the SDK, not in the adapters. CountSQS
//     and CountDynamoDB are client options; every request a client built
//     with them sends is counted by operation, each retry attempt included,
//     whoever makes it: pollers receiving and deleting, the services
//     sending, tests reading counts. Build every client of the stack with
//     them to count the whole stack.
type Counters struct {
	mu        sync.Mutex
	functions map[string]FunctionCount
	api       int64
	sqs       map[string]int64
	dynamo    map[string]int64
}

// FunctionCount is one function's invocations.
type FunctionCount struct {
	Invocations int64
	// Errors counts invocations that returned an error, panicked or ran
	// past their timeout. A partial batch failure is not an error.
	Errors int64
	// Duration is the summed wall time of the invocations, the basis of
	// Lambda's GB-second charge.
	Duration time.Duration
}

// Snapshot is a copy of the counters at one moment.
type Snapshot struct {
	Functions   map[string]FunctionCount // by function name
	APIRequests int64
	SQS         map[string]int64 // SQS requests by operation, e.g. "ReceiveMessage"
	DynamoDB    map[string]int64 // DynamoDB requests by operation, e.g. "TransactWriteItems"
}

// NewCounters returns zeroed counters.
func NewCounters() *Counters {
	return &Counters{
		functions: map[string]FunctionCount{},
		sqs:       map[string]int64{},
		dynamo:    map[string]int64{},
	}
}

// Snapshot copies the current counts.
func (c *Counters) Snapshot() Snapshot {
	if c == nil {
		return Snapshot{Functions: map[string]FunctionCount{}, SQS: map[string]int64{}, DynamoDB: map[string]int64{}}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Snapshot{
		Functions:   maps.Clone(c.functions),
		APIRequests: c.api,
		SQS:         maps.Clone(c.sqs),
		DynamoDB:    maps.Clone(c.dynamo),
	}
}

// Invocations is the number of invocations of every function together.
func (s Snapshot) Invocations() int64 {
	var n int64
	for _, f := range s.Functions {
		n += f.Invocations
	}
	return n
}

// SQSRequests is the number of SQS requests of every operation together.
func (s Snapshot) SQSRequests() int64 { return sum(s.SQS) }

// DynamoDBRequests is the number of DynamoDB requests of every operation together.
func (s Snapshot) DynamoDBRequests() int64 { return sum(s.DynamoDB) }

// Sub returns the counts accrued between earlier and s, for measuring one
// piece of work on counters that keep running.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	d := Snapshot{
		Functions:   map[string]FunctionCount{},
		APIRequests: s.APIRequests - earlier.APIRequests,
		SQS:         subCounts(s.SQS, earlier.SQS),
		DynamoDB:    subCounts(s.DynamoDB, earlier.DynamoDB),
	}
	for name, f := range s.Functions {
		e := earlier.Functions[name]
		f.Invocations -= e.Invocations
		f.Errors -= e.Errors
		f.Duration -= e.Duration
		if f != (FunctionCount{}) {
			d.Functions[name] = f
		}
	}
	return d
}

func subCounts(now, earlier map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for k, v := range now {
		if v -= earlier[k]; v != 0 {
			d[k] = v
		}
	}
	return d
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func (c *Counters) invocation(function string, took time.Duration, failed bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.functions[function]
	f.Invocations++
	f.Duration += took
	if failed {
		f.Errors++
	}
	c.functions[function] = f
}

func (c *Counters) apiRequest() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.api++
	c.mu.Unlock()
}

func (c *Counters) awsRequest(m map[string]int64, operation string) {
	c.mu.Lock()
	m[operation]++
	c.mu.Unlock()
}

// CountSQS is an SQS client option (for sqs.NewFromConfig, or
// emulator.Env.SQSClient) that counts every request the client sends.
func (c *Counters) CountSQS(o *sqs.Options) {
	if c == nil {
		return
	}
	o.APIOptions = append(o.APIOptions, c.countingMiddleware("runledgerCountSQS", c.sqs))
}

// CountDynamoDB is a DynamoDB client option that counts every request the
// client sends.
func (c *Counters) CountDynamoDB(o *dynamodb.Options) {
	if c == nil {
		return
	}
	o.APIOptions = append(o.APIOptions, c.countingMiddleware("runledgerCountDynamoDB", c.dynamo))
}

// countingMiddleware sits at the end of the deserialize step, right before
// the HTTP round trip, which the retry loop (finalize step) wraps: it runs
// once per attempt sent, as AWS bills.
func (c *Counters) countingMiddleware(id string, into map[string]int64) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc(id,
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				c.awsRequest(into, awsmiddleware.GetOperationName(ctx))
				return next.HandleDeserialize(ctx, in)
			}), middleware.After)
	}
}
