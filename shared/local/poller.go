package local

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/runledger/runledger/shared/queue"
)

// Receiver is the part of the SQS adapter a Poller uses; *queue.Client
// implements it.
type Receiver interface {
	Receive(ctx context.Context, queueURL string, opts queue.ReceiveOptions) ([]queue.Message, error)
	DeleteBatch(ctx context.Context, queueURL string, receiptHandles []string) ([]queue.Result, error)
}

// SQSHandler is the shape of a Lambda function behind an SQS event source
// with ReportBatchItemFailures.
type SQSHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// Limits of Lambda's SQS event source that a Poller enforces.
const (
	// MaxBatchingWindow is the longest MaximumBatchingWindowInSeconds.
	MaxBatchingWindow = 5 * time.Minute
	// MaxFunctionTimeout is the longest Lambda timeout.
	MaxFunctionTimeout = 15 * time.Minute
)

// Poller is an SQS event source mapping run in-process: it receives batches
// from one queue and invokes Handler with them as Lambda would, with
// ReportBatchItemFailures on.
//
// A batch's outcome decides what is deleted:
//   - the handler returns no error and no BatchItemFailures: every message
//     of the batch is deleted;
//   - it lists BatchItemFailures by messageId: every other message is
//     deleted, the listed ones stay;
//   - it returns an error, panics, runs past FunctionTimeout, or lists an
//     itemIdentifier that is empty or not in the batch: nothing is deleted.
//
// A message not deleted becomes visible again when its visibility timeout
// runs out and is delivered again with a higher ApproximateReceiveCount;
// once that passes the queue's maxReceiveCount, SQS's redrive moves it to
// the dead-letter queue on the next receive. Delivery is at least once.
//
// Differences from Lambda, none of which a handler can observe through its
// contract: the records carry no SenderId and no
// ApproximateFirstReceiveTimestamp (the queue adapter does not read them),
// a fixed Concurrency replaces Lambda's scaling, and a receive in flight
// when Run's context ends is abandoned: whatever it had taken returns after
// its visibility timeout.
type Poller struct {
	// Name is the function name, for counters, logs and the function ARN.
	Name string
	// Queue receives and deletes; build it on a client with
	// Counters.CountSQS to count the poller's SQS requests.
	Queue    Receiver
	QueueURL string
	// SourceARN is the records' eventSourceARN, the queue's ARN. Empty:
	// arn:aws:sqs:<Region>:<Account>:<queue name from QueueURL>.
	SourceARN string
	// Region is the records' awsRegion. Empty: the region in SourceARN,
	// else DefaultRegion.
	Region string
	// Account fills ARNs. Empty: the account in SourceARN, else DefaultAccount.
	Account string
	// BatchSize is the most records per invocation, 1..10; zero means 10,
	// Lambda's default.
	BatchSize int
	// BatchingWindow is how long to keep gathering records after the first
	// one before invoking with less than BatchSize, 0..MaxBatchingWindow.
	// Zero invokes with whatever one receive returns. SQS waits in whole
	// seconds, so the window is rounded up to one.
	BatchingWindow time.Duration
	// Wait is the long-polling wait of each receive, up to queue.MaxWait;
	// zero means queue.MaxWait, as Lambda polls.
	Wait time.Duration
	// VisibilityTimeout is set on each receive; zero keeps the queue's.
	// Lambda requires it to be at least FunctionTimeout, and so does Run
	// when it is set.
	VisibilityTimeout time.Duration
	// FunctionTimeout is each invocation's deadline; zero means
	// DefaultFunctionTimeout.
	FunctionTimeout time.Duration
	Handler         SQSHandler
	// Concurrency is the number of batches in flight at once; zero means 1.
	Concurrency int
	// Counters, if set, counts the invocations.
	Counters *Counters
	// Logger receives failures: invocations, receives, deletes. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Run polls until ctx is cancelled, then waits for the batches in flight to
// be handled and their messages deleted, and returns nil. It returns an
// error at once if the configuration is invalid.
func (p *Poller) Run(ctx context.Context) error {
	cfg, err := p.resolve()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for range cfg.concurrency {
		wg.Go(func() { cfg.loop(ctx) })
	}
	wg.Wait()
	return nil
}

// pollerConfig is a validated Poller with its defaults filled in.
type pollerConfig struct {
	q           Receiver
	url         string
	arn, region string
	batchSize   int
	window      time.Duration
	receive     queue.ReceiveOptions
	handler     SQSHandler
	concurrency int
	fn          function
	log         *slog.Logger
}

func (p *Poller) resolve() (*pollerConfig, error) {
	name := p.Name
	fail := func(format string, args ...any) (*pollerConfig, error) {
		return nil, fmt.Errorf("poller %s: %s", name, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Name == "":
		return nil, fmt.Errorf("poller for %s: no function name", queue.Name(p.QueueURL))
	case p.Queue == nil:
		return fail("no queue client")
	case p.QueueURL == "":
		return fail("no queue URL")
	case p.Handler == nil:
		return fail("no handler")
	case p.BatchSize < 0 || p.BatchSize > queue.MaxReceiveMessages:
		return fail("batch size %d, want 1..%d", p.BatchSize, queue.MaxReceiveMessages)
	case p.BatchingWindow < 0 || p.BatchingWindow > MaxBatchingWindow:
		return fail("batching window %s, want 0..%s", p.BatchingWindow, MaxBatchingWindow)
	case p.Wait < 0 || p.Wait > queue.MaxWait:
		return fail("wait %s, want 0..%s", p.Wait, queue.MaxWait)
	case p.VisibilityTimeout < 0 || p.VisibilityTimeout > queue.MaxVisibilityTimeout:
		return fail("visibility timeout %s, want 0..%s", p.VisibilityTimeout, queue.MaxVisibilityTimeout)
	case p.FunctionTimeout < 0 || p.FunctionTimeout > MaxFunctionTimeout:
		return fail("function timeout %s, want 0..%s", p.FunctionTimeout, MaxFunctionTimeout)
	case p.Concurrency < 0:
		return fail("concurrency %d, want 1 or more", p.Concurrency)
	}
	timeout := orDefault(p.FunctionTimeout, DefaultFunctionTimeout)
	if p.VisibilityTimeout > 0 && p.VisibilityTimeout < timeout {
		// Lambda refuses such a mapping: a message would show again while
		// its first invocation still runs.
		return fail("visibility timeout %s is shorter than the function timeout %s", p.VisibilityTimeout, timeout)
	}
	arnRegion, arnAccount := arnParts(p.SourceARN)
	region := orDefault(p.Region, orDefault(arnRegion, DefaultRegion))
	account := orDefault(p.Account, orDefault(arnAccount, DefaultAccount))
	arn := orDefault(p.SourceARN, fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, account, queue.Name(p.QueueURL)))
	log := loggerOrDefault(p.Logger)
	batchSize := orDefault(p.BatchSize, queue.MaxReceiveMessages)
	return &pollerConfig{
		q:         p.Queue,
		url:       p.QueueURL,
		arn:       arn,
		region:    region,
		batchSize: batchSize,
		window:    p.BatchingWindow,
		receive: queue.ReceiveOptions{
			MaxMessages:       batchSize,
			Wait:              orDefault(p.Wait, queue.MaxWait),
			VisibilityTimeout: p.VisibilityTimeout,
		},
		handler:     p.Handler,
		concurrency: orDefault(p.Concurrency, 1),
		fn:          function{name: name, region: region, account: account, timeout: timeout, counters: p.Counters, log: log},
		log:         log,
	}, nil
}

// arnParts returns the region and account fields of an ARN, or "" for each.
func arnParts(arn string) (region, account string) {
	f := strings.SplitN(arn, ":", 6)
	if len(f) < 6 || f[0] != "arn" {
		return "", ""
	}
	return f[3], f[4]
}

// Receive errors back off from minBackoff, doubling up to maxBackoff, so a
// stopped emulator is not hammered and a recovered one is found soon.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

func (c *pollerConfig) loop(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		batch, err := c.gather(ctx)
		if len(batch) > 0 {
			c.handle(ctx, batch)
		}
		if err == nil || ctx.Err() != nil {
			backoff = minBackoff
			continue
		}
		c.log.ErrorContext(ctx, "receive failed", "function", c.fn.name, "queue", queue.Name(c.url),
			"retry_in_ms", backoff.Milliseconds(), "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, maxBackoff)
	}
}

// gather long-polls for a first message, then, with a batching window,
// keeps receiving until the batch is full or the window has passed. What
// it has gathered is returned even with an error, so no received message
// is left unhandled.
func (c *pollerConfig) gather(ctx context.Context) ([]queue.Message, error) {
	// The first receive is not cancelled with ctx (its long-poll wait
	// bounds it): an aborted long poll may still take messages, which
	// would then stay hidden for the visibility timeout; received, they
	// are handled before the poller stops.
	batch, err := c.q.Receive(context.WithoutCancel(ctx), c.url, c.receive)
	if err != nil || len(batch) == 0 || c.window == 0 {
		return batch, err
	}
	windowEnd := time.Now().Add(c.window)
	for len(batch) < c.batchSize {
		left := time.Until(windowEnd)
		if left <= 0 {
			break
		}
		opts := c.receive
		opts.MaxMessages = c.batchSize - len(batch)
		opts.Wait = min(left, queue.MaxWait)
		more, err := c.q.Receive(ctx, c.url, opts)
		batch = merge(batch, more)
		if err != nil {
			return batch, err
		}
	}
	return batch, nil
}

// merge adds more to batch. A message already in the batch has come back
// because its visibility timeout ran out while the window was open (a
// window longer than the timeout); its newer delivery replaces the older,
// so the handler sees each message once, with the current receipt handle
// and receive count.
func merge(batch, more []queue.Message) []queue.Message {
	for _, m := range more {
		if i := slices.IndexFunc(batch, func(b queue.Message) bool { return b.ID == m.ID }); i >= 0 {
			batch[i] = m
			continue
		}
		batch = append(batch, m)
	}
	return batch
}

// handle invokes the handler with one batch and deletes what its outcome
// says is done. The deletes use a context detached from ctx: a batch the
// handler finished must not be redelivered because the poller is stopping.
func (c *pollerConfig) handle(ctx context.Context, batch []queue.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(batch))}
	for i, m := range batch {
		ev.Records[i] = sqsRecord(m, c.arn, c.region)
	}
	var resp events.SQSEventResponse
	err := c.fn.invoke(ctx, func(ctx context.Context) error {
		var err error
		resp, err = c.handler(ctx, ev)
		return err
	})
	done, verdict := settle(ev.Records, resp, err)
	if verdict != "" && err == nil {
		c.log.WarnContext(ctx, "batch failed", "function", c.fn.name, "queue", queue.Name(c.url),
			"messages", len(batch), "reason", verdict)
	}
	if len(done) == 0 {
		return
	}
	// As Lambda does: the batch's done messages in DeleteMessageBatch
	// requests, each failed entry on its own.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	handles := make([]string, len(done))
	for j, i := range done {
		handles[j] = batch[i].ReceiptHandle
	}
	results, _ := c.q.DeleteBatch(dctx, c.url, handles)
	for j, r := range results {
		if r.Err != nil {
			c.log.ErrorContext(ctx, "delete failed; the message will be delivered again", "function", c.fn.name,
				"queue", queue.Name(c.url), "message_id", batch[done[j]].ID, "err", r.Err)
		}
	}
}

// settle applies Lambda's ReportBatchItemFailures rules to one
// invocation's outcome: it returns the indexes of the records to delete
// and, when the whole batch counts as failed, why.
func settle(records []events.SQSMessage, resp events.SQSEventResponse, err error) (done []int, wholeBatchFailure string) {
	if err != nil {
		return nil, "the invocation failed"
	}
	failed := make(map[string]bool, len(resp.BatchItemFailures))
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == "" {
			return nil, "a batch item failure has an empty itemIdentifier"
		}
		if !slices.ContainsFunc(records, func(r events.SQSMessage) bool { return r.MessageId == f.ItemIdentifier }) {
			return nil, fmt.Sprintf("batch item failure %q names no message of the batch", f.ItemIdentifier)
		}
		failed[f.ItemIdentifier] = true
	}
	for i, r := range records {
		if !failed[r.MessageId] {
			done = append(done, i)
		}
	}
	return done, ""
}

// sqsRecord shapes one received message as Lambda's SQS event record.
func sqsRecord(m queue.Message, sourceARN, region string) events.SQSMessage {
	rec := events.SQSMessage{
		MessageId:      m.ID,
		ReceiptHandle:  m.ReceiptHandle,
		Body:           m.Body,
		Md5OfBody:      md5Hex([]byte(m.Body)),
		Attributes:     map[string]string{},
		EventSource:    "aws:sqs",
		EventSourceARN: sourceARN,
		AWSRegion:      region,
	}
	if m.ReceiveCount > 0 {
		rec.Attributes["ApproximateReceiveCount"] = strconv.Itoa(m.ReceiveCount)
	}
	if !m.SentAt.IsZero() {
		rec.Attributes["SentTimestamp"] = strconv.FormatInt(m.SentAt.UnixMilli(), 10)
	}
	rec.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.Attributes))
	for k, v := range m.Attributes {
		rec.MessageAttributes[k] = events.SQSMessageAttribute{
			StringValue:      &v,
			StringListValues: []string{},
			BinaryListValues: [][]byte{},
			DataType:         "String",
		}
	}
	if len(m.Attributes) > 0 {
		rec.Md5OfMessageAttributes = md5OfStringAttributes(m.Attributes)
	}
	return rec
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// md5OfStringAttributes is SQS's MD5OfMessageAttributes for String
// attributes: over the attributes sorted by name, each encoded as its
// name, its data type and its value, every one prefixed by its 4-byte
// big-endian length, with the transport byte 1 (string) before the value.
func md5OfStringAttributes(attrs map[string]string) string {
	var buf []byte
	field := func(s string) {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(s)))
		buf = append(buf, s...)
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		field(name)
		field("String")
		buf = append(buf, 1)
		field(attrs[name])
	}
	return md5Hex(buf)
}
