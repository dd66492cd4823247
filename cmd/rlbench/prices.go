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
//
// Storage (DynamoDB $0.25 per GB-month past the free 25 GB), data transfer
// and CloudWatch logs are left out: they depend on retention and logging
// choices, not on the run.
const priceTableDate = "2026-11-30"

const (
	usdPerMillionDynamoWRU     = 0.625
	usdPerMillionDynamoRRU     = 0.125
	usdPerMillionSQSRequests   = 0.40
	usdPerMillionLambdaInvokes = 0.20
	usdPerLambdaArmGBSecond    = 0.0000133334
	usdPerMillionHTTPAPICalls  = 1.00
)

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
	invocationsByFn             map[string]int64
}

// usd is the cost of these units at the price table's rates.
func (c runCost) usd() (total float64, parts map[string]float64) {
	parts = map[string]float64{
		"dynamodb_read":   c.RRU / 1e6 * usdPerMillionDynamoRRU,
		"dynamodb_write":  c.WRU / 1e6 * usdPerMillionDynamoWRU,
		"sqs":             c.SQSRequests / 1e6 * usdPerMillionSQSRequests,
		"lambda_requests": c.Invocations / 1e6 * usdPerMillionLambdaInvokes,
		"lambda_duration": c.GBSeconds * usdPerLambdaArmGBSecond,
		"api_gateway":     c.APIRequests / 1e6 * usdPerMillionHTTPAPICalls,
	}
	for _, v := range parts {
		total += v
	}
	return total, parts
}
