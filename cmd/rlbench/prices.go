package main

// AWS list prices, us-east-1 (US East, N. Virginia), on-demand, first
// pricing tier, no free tier, checked on 2026-11-30 for these pages (their
// rate tables render client-side, so the figures were taken from AWS's API
// Gateway cost-optimization whitepaper and from 2026 price guides quoting
// these pages):
//
//	DynamoDB    https://aws.amazon.com/dynamodb/pricing/on-demand/
//	            (the on-demand rates since the price cut of 2024-11-01)
//	SQS         https://aws.amazon.com/sqs/pricing/
//	            (standard queues, first 100 billion requests a month; every
//	            64 KB chunk of a payload is one request)
//	Lambda      https://aws.amazon.com/lambda/pricing/
//	            (requests; duration on Arm, first 7.5 billion GB-s a month)
//	API Gateway https://aws.amazon.com/api-gateway/pricing/
//	            (HTTP APIs, first 300 million requests a month, metered in
//	            512 KB increments)
//	EventBridge https://aws.amazon.com/eventbridge/pricing/
//	            (custom events put on a bus, $1.00 per million; every 64 KB
//	            chunk of an entry is one event)
//	CloudWatch  https://aws.amazon.com/cloudwatch/pricing/
//	            (Logs, standard class: data ingested, $0.50 per GB of the
//	            uncompressed log lines)
//	DynamoDB    https://aws.amazon.com/dynamodb/pricing/on-demand/
//	            (data storage, Standard table class, $0.25 per GB-month past
//	            the free 25 GB, 100 B of overhead per item and per index
//	            entry; continuous backups (point-in-time recovery) $0.20 per
//	            GB-month of the table's size)
//
// Data transfer is left out (within the Region it is free), and so are a
// deployment's fixed costs (the ticker's and reconciler's passes, alarms).
const priceTableDate = "2026-11-30"

const (
	usdPerMillionDynamoWRU     = 0.625
	usdPerMillionDynamoRRU     = 0.125
	usdPerMillionSQSRequests   = 0.40
	usdPerMillionLambdaInvokes = 0.20
	usdPerLambdaArmGBSecond    = 0.0000133334
	usdPerMillionHTTPAPICalls  = 1.00

	usdPerMillionEventBridgeEvents = 1.00
	usdPerGBLogsIngested           = 0.50
	usdPerGBMonthDynamoStorage     = 0.25
	usdPerGBMonthDynamoPITR        = 0.20
)

// Sizes the prices count in.
const (
	bytesPerGB = 1 << 30 // DynamoDB and CloudWatch count binary GB
	// sqsChunk and eventBridgeChunk: a request (an event) is billed once
	// per started chunk of its payload.
	sqsChunk         = 64 << 10
	eventBridgeChunk = 64 << 10
	// dynamoItemOverhead is what DynamoDB adds to every item and every
	// index entry for storage ("Amazon DynamoDB pricing", data storage).
	dynamoItemOverhead = 100
)

// stackPITR says whether the CDK stack enables point-in-time recovery on
// the table (infra/scheduler/scheduler.go: PointInTimeRecoverySpecification
// true): its storage is billed twice, as the table and as its backups.
const stackPITR = true

// lambdaPlatformLines are the lines Lambda itself writes to a function's
// log group on every invocation (START, END, REPORT; the REPORT line of a
// cold start adds an Init Duration): about 250 bytes.
var lambdaPlatformLines = []string{
	"START RequestId: 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0 Version: $LATEST\n",
	"END RequestId: 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n",
	"REPORT RequestId: 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\tDuration: 12.34 ms\tBilled Duration: 13 ms\tMemory Size: 512 MB\tMax Memory Used: 48 MB\t\n",
}

// apiAccessLogLine is one line of the HTTP API's access log
// (infra/scheduler/api.go, accessLogFormat) for a worker's call with an
// API key: every API request writes one.
const apiAccessLogLine = `{"authorizerError":"-","integrationError":"-","ip":"203.0.113.10","jwtSubject":"-","latencyMs":"21",` +
	`"path":"/v1/attempts/complete","principal":"-","requestId":"Nq3xYhZpoAMEbXw=","requestTimeEpoch":"1765152000",` +
	`"responseLength":"143","routeKey":"POST /v1/attempts/complete","status":"200","userAgent":"runledger-worker/1.0 Go-http-client/1.1"}` + "\n"

// lambdaPlatformLogBytes is the bytes of lambdaPlatformLines.
func lambdaPlatformLogBytes() int {
	n := 0
	for _, l := range lambdaPlatformLines {
		n += len(l)
	}
	return n
}

// lambdaMemoryMiB is each function's memory size in the CDK stack
// (infra/scheduler: functionSpecs); the local stack's invocation times are
// billed as if they ran at that size. The events pollers of the local stack
// count under "events" (the delay queue feeds the same function).
var lambdaMemoryMiB = map[string]int{
	"api":        512,
	"events":     256,
	"ticker":     256,
	"reconciler": 256,
}

// runCost is what one run consumed, in billable units.
type runCost struct {
	RRU, WRU    float64
	SQSRequests float64
	Invocations float64
	GBSeconds   float64
	APIRequests float64
	// DynamoDBCalls counts every DynamoDB call; Transactions the
	// TransactWriteItems among them. Not priced: they carry over to AWS
	// whatever the machine.
	DynamoDBCalls, Transactions float64
	// EventBridgeEvents are the entries the stack puts on its bus, in
	// billed events (64 KB chunks).
	EventBridgeEvents float64
	// LogBytes are the bytes the stack's functions and API write to
	// CloudWatch Logs: their own lines (at the deployed level), their
	// metric lines, Lambda's lines per invocation, an access log line per
	// API request.
	LogBytes float64
	// StoredBytes are the bytes the run leaves in the table and its
	// indexes, as DynamoDB bills them, kept a month (an item expiring
	// earlier counts for its share of the month).
	StoredBytes float64
	// LambdaSeconds (the invocations' summed duration) and TxSeconds (how
	// long a transaction holds its items: reportLimits sets it) feed the
	// heat model's limits; not priced beyond GBSeconds.
	LambdaSeconds, TxSeconds float64
	invocationsByFn          map[string]int64
}

// usd is the cost of these units at the price table's rates.
func (c runCost) usd() (total float64, parts map[string]float64) {
	parts = map[string]float64{
		"dynamodb_read":    c.RRU / 1e6 * usdPerMillionDynamoRRU,
		"dynamodb_write":   c.WRU / 1e6 * usdPerMillionDynamoWRU,
		"sqs":              c.SQSRequests / 1e6 * usdPerMillionSQSRequests,
		"lambda_requests":  c.Invocations / 1e6 * usdPerMillionLambdaInvokes,
		"lambda_duration":  c.GBSeconds * usdPerLambdaArmGBSecond,
		"api_gateway":      c.APIRequests / 1e6 * usdPerMillionHTTPAPICalls,
		"eventbridge":      c.EventBridgeEvents / 1e6 * usdPerMillionEventBridgeEvents,
		"cloudwatch_logs":  c.LogBytes / bytesPerGB * usdPerGBLogsIngested,
		"dynamodb_storage": c.StoredBytes / bytesPerGB * usdPerGBMonthDynamoStorage,
	}
	if stackPITR {
		parts["dynamodb_pitr"] = c.StoredBytes / bytesPerGB * usdPerGBMonthDynamoPITR
	}
	for _, v := range parts {
		total += v
	}
	return total, parts
}

// minus is c less o, count by count: what a run adds beyond another.
func (c runCost) minus(o runCost) runCost {
	return c.combine(o, func(a, b float64) float64 { return a - b })
}

// scaled is every count of c times f.
func (c runCost) scaled(f float64) runCost {
	return c.combine(c, func(a, _ float64) float64 { return a * f })
}

// combine applies op to each count of c and o.
func (c runCost) combine(o runCost, op func(a, b float64) float64) runCost {
	return runCost{
		RRU: op(c.RRU, o.RRU), WRU: op(c.WRU, o.WRU),
		SQSRequests: op(c.SQSRequests, o.SQSRequests), Invocations: op(c.Invocations, o.Invocations),
		GBSeconds: op(c.GBSeconds, o.GBSeconds), APIRequests: op(c.APIRequests, o.APIRequests),
		DynamoDBCalls: op(c.DynamoDBCalls, o.DynamoDBCalls), Transactions: op(c.Transactions, o.Transactions),
		EventBridgeEvents: op(c.EventBridgeEvents, o.EventBridgeEvents), LogBytes: op(c.LogBytes, o.LogBytes),
		StoredBytes: op(c.StoredBytes, o.StoredBytes), LambdaSeconds: op(c.LambdaSeconds, o.LambdaSeconds),
		TxSeconds: c.TxSeconds,
	}
}

// atLeastZero is c with every negative count 0.
func (c runCost) atLeastZero() runCost {
	return c.combine(c, func(a, _ float64) float64 { return max(a, 0) })
}
