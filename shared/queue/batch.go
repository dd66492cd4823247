package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// MaxBatchEntries is the most entries one SendMessageBatch or
// DeleteMessageBatch request takes. A send batch is also bounded by
// MaxPayloadBytes for all its entries together.
const MaxBatchEntries = 10

// Entry is one message of SendBatch.
type Entry struct {
	Body  string
	Attrs map[string]string
	// Delay keeps the message invisible, as SendDelayed's (0..MaxDelay).
	Delay time.Duration
}

// Result is what became of one entry of a batch: the message id of a sent
// message, or the entry's error, the one a single Send or Delete of it
// would have returned (errors.Is works the same).
type Result struct {
	ID  string
	Err error
}

// SendBatch sends entries with as few SendMessageBatch requests as SQS's
// limits allow (MaxBatchEntries entries and MaxPayloadBytes a request),
// those requests concurrently, and returns one Result per entry, in order.
// An entry that fails validation is refused before any request, as Send
// refuses it; one SQS refuses carries SQS's reason; when a whole request
// fails, each of its entries carries that failure, and, as with Send, such
// a message may or may not have been sent. The error is nil when every
// entry was sent, else it joins the failed entries' errors.
func (c *Client) SendBatch(ctx context.Context, queueURL string, entries []Entry) ([]Result, error) {
	q := Name(queueURL)
	results := make([]Result, len(entries))
	var valid []int
	for i, e := range entries {
		if err := validateSend(e.Body, e.Attrs, e.Delay); err != nil {
			results[i].Err = fmt.Errorf("send batch to %s: entry %d: %w", q, i, err)
			continue
		}
		valid = append(valid, i)
	}
	size := func(i int) int { return PayloadSize(entries[i].Body, entries[i].Attrs) }
	eachRequest(chunks(valid, size, MaxPayloadBytes), func(chunk []int) {
		if len(chunk) == 1 {
			// A request of one entry is SendMessage: the same one request,
			// and fauxqs wakes a waiting receive sooner for it (measured:
			// 70 against 135 ms a chain step).
			e := entries[chunk[0]]
			results[chunk[0]].ID, results[chunk[0]].Err = c.SendDelayed(ctx, queueURL, e.Body, e.Attrs, e.Delay)
			return
		}
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL)}
		for _, i := range chunk {
			e := entries[i]
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(e.Body),
				DelaySeconds: seconds(e.Delay), MessageAttributes: messageAttributes(e.Attrs),
			})
		}
		out, err := c.api.SendMessageBatch(ctx, in)
		if err != nil {
			failAll(results, chunk, fmt.Errorf("send batch to %s: %w", q, translate(err)))
			return
		}
		sent := map[string]string{}
		for _, ok := range out.Successful {
			sent[aws.ToString(ok.Id)] = aws.ToString(ok.MessageId)
		}
		settle(results, chunk, "send batch to "+q, sent, out.Failed)
	})
	return results, joinFailures(results)
}

// DeleteBatch deletes the messages of these deliveries with as few
// DeleteMessageBatch requests as SQS allows (MaxBatchEntries a request),
// those requests concurrently, and returns one Result per handle, in
// order, as SendBatch does. A handle of a delivery already deleted
// succeeds, as with Delete.
func (c *Client) DeleteBatch(ctx context.Context, queueURL string, receiptHandles []string) ([]Result, error) {
	q := Name(queueURL)
	results := make([]Result, len(receiptHandles))
	var valid []int
	for i, h := range receiptHandles {
		if h == "" {
			results[i].Err = fmt.Errorf("delete batch from %s: entry %d: %w: empty", q, i, ErrReceiptInvalid)
			continue
		}
		valid = append(valid, i)
	}
	eachRequest(chunks(valid, nil, 0), func(chunk []int) {
		if len(chunk) == 1 {
			results[chunk[0]].Err = c.Delete(ctx, queueURL, receiptHandles[chunk[0]])
			return
		}
		in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL)}
		for _, i := range chunk {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(receiptHandles[i]),
			})
		}
		out, err := c.api.DeleteMessageBatch(ctx, in)
		if err != nil {
			failAll(results, chunk, fmt.Errorf("delete batch from %s: %w", q, translate(err)))
			return
		}
		deleted := map[string]string{}
		for _, ok := range out.Successful {
			deleted[aws.ToString(ok.Id)] = ""
		}
		settle(results, chunk, "delete batch from "+q, deleted, out.Failed)
	})
	return results, joinFailures(results)
}

// chunks splits the entries (indexes) into requests of at most
// MaxBatchEntries entries whose sizes (nil: no size limit) add up to at
// most limit, keeping their order.
func chunks(entries []int, size func(int) int, limit int) [][]int {
	var out [][]int
	var cur []int
	total := 0
	for _, i := range entries {
		n := 0
		if size != nil {
			n = size(i)
		}
		if len(cur) == MaxBatchEntries || (size != nil && total+n > limit) {
			out, cur, total = append(out, cur), nil, 0
		}
		cur = append(cur, i)
		total += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// eachRequest runs request for every chunk, concurrently, and waits.
func eachRequest(chunks [][]int, request func([]int)) {
	if len(chunks) == 1 {
		request(chunks[0])
		return
	}
	var wg sync.WaitGroup
	for _, chunk := range chunks {
		wg.Go(func() { request(chunk) })
	}
	wg.Wait()
}

// entryIndex reads an answer's entry id back, if it is one of chunk's.
func entryIndex(id string, chunk []int) (int, bool) {
	i, err := strconv.Atoi(id)
	if err != nil || !slices.Contains(chunk, i) {
		return 0, false
	}
	return i, true
}

func failAll(results []Result, chunk []int, err error) {
	for _, i := range chunk {
		results[i].Err = err
	}
}

// settle records one request's answer in results: the successful
// entries (entry id to message id), the failed ones with SQS's reason, and
// those the answer names neither way, whose fate is unknown, as after a
// failed request.
func settle(results []Result, chunk []int, op string, succeeded map[string]string, failed []types.BatchResultErrorEntry) {
	answered := map[int]bool{}
	for id, msgID := range succeeded {
		if i, known := entryIndex(id, chunk); known {
			results[i].ID, answered[i] = msgID, true
		}
	}
	for _, f := range failed {
		if i, known := entryIndex(aws.ToString(f.Id), chunk); known {
			results[i].Err = fmt.Errorf("%s: entry %d: %w", op, i, entryError(aws.ToString(f.Code), aws.ToString(f.Message)))
			answered[i] = true
		}
	}
	for _, i := range chunk {
		if !answered[i] {
			results[i].Err = fmt.Errorf("%s: entry %d: %w: the answer does not mention it", op, i, ErrRequestFailed)
		}
	}
}

// joinFailures joins the entries' errors, each failed request's once.
func joinFailures(results []Result) error {
	var errs []error
	seen := map[error]bool{}
	for _, r := range results {
		if r.Err != nil && !seen[r.Err] {
			seen[r.Err] = true
			errs = append(errs, r.Err)
		}
	}
	return errors.Join(errs...)
}
