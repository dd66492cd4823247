package main

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/runledger/runledger/shared/store"
)

// meter gathers what the cost scenario needs beyond local.Counters: the
// capacity DynamoDB reports for every call (the client asks for it on every
// read and write: ReturnConsumedCapacity=TOTAL), the store's own computed
// write units (store.WithCapacityReports), and SQS receives that came back
// empty (a Lambda event source's idle polling, not work of a run).
type meter struct {
	mu sync.Mutex
	m  meterCounts
}

type meterCounts struct {
	ReadRequests, WriteRequests int64
	// ReportedRRU and ReportedWCU are the endpoint's figures; the
	// Unreported counts are calls it answered without one.
	ReportedRRU, ReportedWCU          float64
	UnreportedReads, UnreportedWrites int64
	// ComputedWCU sums store.CapacityReport.ComputedWCU: DynamoDB's
	// pricing rules applied to the item sizes (table and index writes).
	ComputedWCU  float64
	StoreReports int64
	// EmptyReceives are SQS ReceiveMessage calls that returned nothing.
	EmptyReceives int64
	// SQSExtraChunks are the requests SQS bills beyond one a call: a
	// send's or a receive's payload is one request per started 64 KB.
	SQSExtraChunks int64
	// Latency sums each DynamoDB operation's time (the call with its
	// retries) and counts its calls.
	Latency map[string]opTime
	// Writes lists the store's capacity reports in order (the cost
	// scenario clears it before each run).
	Writes []store.CapacityReport
	// TxTimes lists each TransactWriteItems call's time, in order.
	TxTimes []time.Duration
}

func (m *meter) snapshot() meterCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.m
	c.Writes = slices.Clone(c.Writes)
	c.TxTimes = slices.Clone(c.TxTimes)
	c.Latency = maps.Clone(c.Latency)
	return c
}

// opTime is how many calls of one operation took how long together.
type opTime struct {
	N     int64
	Total time.Duration
}

// clearWrites forgets the store's reports gathered so far.
func (m *meter) clearWrites() {
	m.mu.Lock()
	m.m.Writes = nil
	m.mu.Unlock()
}

func (a meterCounts) sub(b meterCounts) meterCounts {
	d := meterCounts{
		ReadRequests: a.ReadRequests - b.ReadRequests, WriteRequests: a.WriteRequests - b.WriteRequests,
		ReportedRRU: a.ReportedRRU - b.ReportedRRU, ReportedWCU: a.ReportedWCU - b.ReportedWCU,
		UnreportedReads: a.UnreportedReads - b.UnreportedReads, UnreportedWrites: a.UnreportedWrites - b.UnreportedWrites,
		ComputedWCU: a.ComputedWCU - b.ComputedWCU, StoreReports: a.StoreReports - b.StoreReports,
		EmptyReceives: a.EmptyReceives - b.EmptyReceives, SQSExtraChunks: a.SQSExtraChunks - b.SQSExtraChunks,
		Writes:  a.Writes[min(len(b.Writes), len(a.Writes)):],
		TxTimes: a.TxTimes[min(len(b.TxTimes), len(a.TxTimes)):],
		Latency: map[string]opTime{},
	}
	for op, t := range a.Latency {
		e := b.Latency[op]
		if t.N -= e.N; t.N > 0 {
			t.Total -= e.Total
			d.Latency[op] = t
		}
	}
	return d
}

// storeReport is the store.WithCapacityReports callback.
func (m *meter) storeReport(r store.CapacityReport) {
	m.mu.Lock()
	m.m.ComputedWCU += r.ComputedWCU()
	m.m.StoreReports++
	m.m.Writes = append(m.m.Writes, r)
	m.mu.Unlock()
}

// dynamoOption is a DynamoDB client option: every call asks for its
// consumed capacity, and the answer is added up as read or write units.
func (m *meter) dynamoOption(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("rlbenchCapacity",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				isRead, isWrite := askCapacity(in.Parameters)
				began := time.Now()
				out, md, err := next.HandleInitialize(ctx, in)
				took := time.Since(began)
				op := awsmiddleware.GetOperationName(ctx)
				m.mu.Lock()
				if m.m.Latency == nil {
					m.m.Latency = map[string]opTime{}
				}
				t := m.m.Latency[op]
				t.N++
				t.Total += took
				m.m.Latency[op] = t
				if op == "TransactWriteItems" {
					m.m.TxTimes = append(m.m.TxTimes, took)
				}
				m.mu.Unlock()
				if err == nil && (isRead || isWrite) {
					units, reported := consumed(out.Result)
					m.mu.Lock()
					switch {
					case isRead:
						m.m.ReadRequests++
						m.m.ReportedRRU += units
						if !reported {
							m.m.UnreportedReads++
						}
					case isWrite:
						m.m.WriteRequests++
						m.m.ReportedWCU += units
						if !reported {
							m.m.UnreportedWrites++
						}
					}
					m.mu.Unlock()
				}
				return out, md, err
			}), middleware.After)
	})
}

// askCapacity sets ReturnConsumedCapacity=TOTAL on a data call that has
// none and says whether the call reads or writes.
func askCapacity(p any) (isRead, isWrite bool) {
	total := types.ReturnConsumedCapacityTotal
	set := func(f *types.ReturnConsumedCapacity) {
		if *f == "" || *f == types.ReturnConsumedCapacityNone {
			*f = total
		}
	}
	switch in := p.(type) {
	case *dynamodb.GetItemInput:
		set(&in.ReturnConsumedCapacity)
		return true, false
	case *dynamodb.QueryInput:
		set(&in.ReturnConsumedCapacity)
		return true, false
	case *dynamodb.ScanInput:
		set(&in.ReturnConsumedCapacity)
		return true, false
	case *dynamodb.BatchGetItemInput:
		set(&in.ReturnConsumedCapacity)
		return true, false
	case *dynamodb.TransactGetItemsInput:
		set(&in.ReturnConsumedCapacity)
		return true, false
	case *dynamodb.PutItemInput:
		set(&in.ReturnConsumedCapacity)
		return false, true
	case *dynamodb.UpdateItemInput:
		set(&in.ReturnConsumedCapacity)
		return false, true
	case *dynamodb.DeleteItemInput:
		set(&in.ReturnConsumedCapacity)
		return false, true
	case *dynamodb.BatchWriteItemInput:
		set(&in.ReturnConsumedCapacity)
		return false, true
	case *dynamodb.TransactWriteItemsInput:
		set(&in.ReturnConsumedCapacity)
		return false, true
	}
	return false, false
}

// consumed sums the capacity units of a data call's answer.
func consumed(result any) (units float64, reported bool) {
	var cc []types.ConsumedCapacity
	switch out := result.(type) {
	case *dynamodb.GetItemOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		cc = out.ConsumedCapacity
	case *dynamodb.TransactGetItemsOutput:
		cc = out.ConsumedCapacity
	case *dynamodb.PutItemOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		cc = one(out.ConsumedCapacity)
	case *dynamodb.BatchWriteItemOutput:
		cc = out.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		cc = out.ConsumedCapacity
	}
	for _, c := range cc {
		if c.CapacityUnits != nil {
			units += *c.CapacityUnits
			reported = true
		}
	}
	return units, reported
}

func one(c *types.ConsumedCapacity) []types.ConsumedCapacity {
	if c == nil {
		return nil
	}
	return []types.ConsumedCapacity{*c}
}

// sqsOption is an SQS client option that counts receives returning no
// message and the 64 KB chunks of payloads beyond a call's first.
func (m *meter) sqsOption(o *sqs.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("rlbenchEmptyReceives",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				if err != nil {
					return out, md, err
				}
				empty := false
				payload := 0
				switch v := in.Parameters.(type) {
				case *sqs.SendMessageInput:
					payload = len(aws.ToString(v.MessageBody))
				case *sqs.SendMessageBatchInput:
					for _, e := range v.Entries {
						payload += len(aws.ToString(e.MessageBody))
					}
				}
				if r, ok := out.Result.(*sqs.ReceiveMessageOutput); ok {
					empty = len(r.Messages) == 0
					for _, msg := range r.Messages {
						payload += len(aws.ToString(msg.Body))
					}
				}
				m.mu.Lock()
				if empty {
					m.m.EmptyReceives++
				}
				m.m.SQSExtraChunks += int64(max(0, (payload-1)/sqsChunk))
				m.mu.Unlock()
				return out, md, err
			}), middleware.After)
	})
}
