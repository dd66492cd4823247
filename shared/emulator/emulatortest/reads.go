package emulatortest

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// ReadCounter counts the items DynamoDB examined for the reads of the
// clients built with its Option: Query's ScannedCount, one per GetItem, the
// items BatchGetItem returned. Tests use it to show that what a read costs
// follows live work, not the table's history.
type ReadCounter struct{ items atomic.Int64 }

// Items is the count so far.
func (c *ReadCounter) Items() int64 { return c.items.Load() }

// Reset starts the count again.
func (c *ReadCounter) Reset() { c.items.Store(0) }

// Option counts the reads of a client: env.DynamoDBClient(c.Option).
func (c *ReadCounter) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("countReads",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				switch r := out.Result.(type) {
				case *dynamodb.QueryOutput:
					c.items.Add(int64(r.ScannedCount))
				case *dynamodb.GetItemOutput:
					c.items.Add(1)
				case *dynamodb.BatchGetItemOutput:
					for _, items := range r.Responses {
						c.items.Add(int64(len(items)))
					}
				}
				return out, md, err
			}), middleware.After)
	})
}
