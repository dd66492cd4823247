package local_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runledger/runledger/shared/local"
	"github.com/runledger/runledger/shared/queue"
)

// invocation is what a test handler saw.
type invocation struct {
	ev       events.SQSEvent
	deadline time.Time
	lc       *lambdacontext.LambdaContext
}

func ids(ev events.SQSEvent) []string {
	var out []string
	for _, r := range ev.Records {
		out = append(out, r.MessageId)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func send(t *testing.T, client *queue.Client, url, body string, attrs map[string]string) string {
	t.Helper()
	id, err := client.Send(t.Context(), url, body, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitTotal polls the queue's message count (visible, in flight and
// delayed) until it is want.
func waitTotal(t *testing.T, client *queue.Client, url string, want int) {
	t.Helper()
	eventually(t, 15*time.Second, func() (bool, string) {
		c, err := client.Counts(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		return c.Total() == want, fmt.Sprintf("%s holds %+v, want %d in all", queue.Name(url), c, want)
	})
}

// A batch reaches the handler as Lambda's SQS event: every record field
// Lambda fills (but SenderId and ApproximateFirstReceiveTimestamp), the
// function timeout as the deadline, a Lambda context; and a successful
// batch is deleted.
func TestPollerDeliversLambdaShapedRecords(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{VisibilityTimeout: 30 * time.Second})
	counters := local.NewCounters()
	client := newClient(counters)

	// One message through the SDK, for SQS's own MD5 of its attributes.
	before := time.Now()
	out, err := rawSQS().SendMessage(t.Context(), &sqs.SendMessageInput{
		QueueUrl:    aws.String(q.URL),
		MessageBody: aws.String(`{"run":"r1"}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"run":     {DataType: aws.String("String"), StringValue: aws.String("r1")},
			"task":    {DataType: aws.String("String"), StringValue: aws.String("extract")},
			"attempt": {DataType: aws.String("String"), StringValue: aws.String("1")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	first := aws.ToString(out.MessageId)
	second := send(t, client, q.URL, "second body", nil)
	third := send(t, client, q.URL, "third body", map[string]string{"run": "r3"})
	after := time.Now()

	got := make(chan invocation, 10)
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, SourceARN: q.ARN, Region: env.Region(),
		BatchSize: 3, BatchingWindow: 5 * time.Second, Wait: time.Second,
		FunctionTimeout: 7 * time.Second, Counters: counters,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			deadline, _ := ctx.Deadline()
			lc, _ := lambdacontext.FromContext(ctx)
			got <- invocation{ev: ev, deadline: deadline, lc: lc}
			return events.SQSEventResponse{}, nil
		},
	}
	invoked := time.Now()
	stop := runInBackground(t, p.Run)
	inv := receiveWithin(t, got, 15*time.Second, "batch")

	if want := sorted(first, second, third); !reflect.DeepEqual(ids(inv.ev), want) {
		t.Fatalf("batch ids %v, want %v (all three, gathered within the window)", ids(inv.ev), want)
	}
	if inv.deadline.Before(invoked.Add(7*time.Second)) || inv.deadline.After(time.Now().Add(7*time.Second)) {
		t.Errorf("deadline %s, want the function timeout (7s) from the invocation", inv.deadline)
	}
	if inv.lc == nil || inv.lc.AwsRequestID == "" || inv.lc.InvokedFunctionArn != "arn:aws:lambda:"+env.Region()+":"+accountOf(q.ARN)+":function:events" {
		t.Errorf("lambda context %+v, want a request id and the events function's ARN", inv.lc)
	}
	bodies := map[string]string{first: `{"run":"r1"}`, second: "second body", third: "third body"}
	for _, r := range inv.ev.Records {
		if r.Body != bodies[r.MessageId] || r.ReceiptHandle == "" {
			t.Errorf("record %s: body %q, receipt handle %q", r.MessageId, r.Body, r.ReceiptHandle)
		}
		sum := md5.Sum([]byte(r.Body))
		if r.Md5OfBody != hex.EncodeToString(sum[:]) {
			t.Errorf("record %s: md5OfBody %s, want %x", r.MessageId, r.Md5OfBody, sum)
		}
		if r.EventSource != "aws:sqs" || r.EventSourceARN != q.ARN || r.AWSRegion != env.Region() {
			t.Errorf("record %s: source %q arn %q region %q, want aws:sqs %q %q",
				r.MessageId, r.EventSource, r.EventSourceARN, r.AWSRegion, q.ARN, env.Region())
		}
		if r.Attributes["ApproximateReceiveCount"] != "1" {
			t.Errorf("record %s: ApproximateReceiveCount %q, want 1", r.MessageId, r.Attributes["ApproximateReceiveCount"])
		}
		sent, err := strconv.ParseInt(r.Attributes["SentTimestamp"], 10, 64)
		if err != nil || sent < before.Add(-time.Second).UnixMilli() || sent > after.Add(time.Second).UnixMilli() {
			t.Errorf("record %s: SentTimestamp %q, want milliseconds between %d and %d",
				r.MessageId, r.Attributes["SentTimestamp"], before.UnixMilli(), after.UnixMilli())
		}
	}
	rec := func(id string) events.SQSMessage {
		i := slices.IndexFunc(inv.ev.Records, func(r events.SQSMessage) bool { return r.MessageId == id })
		return inv.ev.Records[i]
	}
	r1 := rec(first)
	if len(r1.MessageAttributes) != 3 || *r1.MessageAttributes["task"].StringValue != "extract" || r1.MessageAttributes["task"].DataType != "String" {
		t.Errorf("message attributes %+v, want run, task and attempt as String", r1.MessageAttributes)
	}
	if r1.Md5OfMessageAttributes != aws.ToString(out.MD5OfMessageAttributes) {
		t.Errorf("md5OfMessageAttributes %s, SQS computed %s", r1.Md5OfMessageAttributes, aws.ToString(out.MD5OfMessageAttributes))
	}
	if r2 := rec(second); len(r2.MessageAttributes) != 0 || r2.Md5OfMessageAttributes != "" {
		t.Errorf("record without attributes: %+v, md5 %q", r2.MessageAttributes, r2.Md5OfMessageAttributes)
	}

	// The JSON Lambda would send has the fixture's shape, less the two
	// attributes the queue adapter does not read.
	fixture := shape(t, mustReadFile(t, "testdata/sqs_event.json"))
	attrsShape := fixture.(map[string]any)["Records"].([]any)[0].(map[string]any)["attributes"].(map[string]any)
	delete(attrsShape, "SenderId")
	delete(attrsShape, "ApproximateFirstReceiveTimestamp")
	one := events.SQSEvent{Records: []events.SQSMessage{r1}}
	one.Records[0].MessageAttributes = map[string]events.SQSMessageAttribute{"run": r1.MessageAttributes["run"]}
	doc, err := json.Marshal(one)
	if err != nil {
		t.Fatal(err)
	}
	if ours := shape(t, doc); !reflect.DeepEqual(ours, fixture) {
		t.Errorf("event JSON shape\n%v\nwant (testdata/sqs_event.json)\n%v", ours, fixture)
	}

	waitTotal(t, client, q.URL, 0)
	stop()
	snap := counters.Snapshot()
	if f := snap.Functions["events"]; f.Invocations != 1 || f.Errors != 0 {
		t.Errorf("counted %+v for events, want 1 invocation, no error", f)
	}
	if snap.SQS["ReceiveMessage"] < 1 || snap.SQS["DeleteMessageBatch"] != 1 || snap.SQS["DeleteMessage"] != 0 || snap.SQS["SendMessage"] != 2 {
		t.Errorf("SQS requests %v, want receives, one batch delete of the three and the 2 sends made with the counted client", snap.SQS)
	}
}

// accountOf is the account field of an ARN.
func accountOf(arn string) string {
	f := strings.Split(arn, ":")
	if len(f) < 6 {
		return ""
	}
	return f[4]
}

// scripted is a handler that answers each invocation with the next step.
type scripted struct {
	mu    sync.Mutex
	calls []events.SQSEvent
	steps []func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)
	seen  chan events.SQSEvent
}

func newScripted(steps ...func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)) *scripted {
	return &scripted{steps: steps, seen: make(chan events.SQSEvent, 100)}
}

func (s *scripted) handle(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	s.mu.Lock()
	n := len(s.calls)
	s.calls = append(s.calls, ev)
	s.mu.Unlock()
	s.seen <- ev
	step := s.steps[min(n, len(s.steps)-1)]
	return step(ctx, ev)
}

func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func succeed(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return events.SQSEventResponse{}, nil
}

// Partial batch failure: the messages not listed are deleted at once, the
// listed one comes back after its visibility timeout, alone.
func TestPollerPartialBatchFailure(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	a := send(t, client, q.URL, "a", nil)
	b := send(t, client, q.URL, "b", nil)
	c := send(t, client, q.URL, "c", nil)

	release := make(chan struct{})
	h := newScripted(
		func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: b}}}, nil
		},
		func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			<-release
			return events.SQSEventResponse{}, nil
		},
	)
	p := &local.Poller{
		Name: "worker", Queue: client, QueueURL: q.URL, BatchSize: 3, BatchingWindow: time.Second, Wait: time.Second,
		// Longer than the window: b must not come back while its own
		// redelivery's window is still open.
		VisibilityTimeout: 2 * time.Second, FunctionTimeout: time.Second, Handler: h.handle,
	}
	runInBackground(t, p.Run)
	t.Cleanup(sync.OnceFunc(func() { close(release) })) // runs before the stop, even on failure

	if got := ids(receiveWithin(t, h.seen, 15*time.Second, "first batch")); !reflect.DeepEqual(got, sorted(a, b, c)) {
		t.Fatalf("first batch %v, want %v", got, sorted(a, b, c))
	}
	// a and c are deleted; b stays, in flight or back in view.
	waitTotal(t, client, q.URL, 1)
	again := receiveWithin(t, h.seen, 15*time.Second, "redelivery")
	if len(again.Records) != 1 || again.Records[0].MessageId != b || again.Records[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("redelivery %v (attributes %v), want only %s, received twice", ids(again), again.Records[0].Attributes, b)
	}
	// While b's second invocation runs, a and c have not come back.
	if cnt, err := client.Counts(t.Context(), q.URL); err != nil || cnt.Total() != 1 || cnt.InFlight != 1 {
		t.Fatalf("during b's redelivery the queue holds %+v (%v), want b alone, in flight", cnt, err)
	}
	release <- struct{}{}
	waitTotal(t, client, q.URL, 0)
	if n := h.count(); n != 2 {
		t.Errorf("%d invocations, want 2", n)
	}
}

// A handler error fails the whole batch: nothing is deleted, every
// message comes back.
func TestPollerHandlerErrorRedeliversWholeBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	a := send(t, client, q.URL, "a", nil)
	b := send(t, client, q.URL, "b", nil)
	counters := local.NewCounters()
	h := newScripted(
		func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			// The failures listed do not matter once the invocation fails.
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: a}}}, errors.New("store unavailable")
		},
		succeed,
	)
	logger, logs := newLogger(t)
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, BatchSize: 2, BatchingWindow: time.Second, Wait: time.Second,
		VisibilityTimeout: time.Second, FunctionTimeout: time.Second, Handler: h.handle, Counters: counters, Logger: logger,
	}
	runInBackground(t, p.Run)
	first := receiveWithin(t, h.seen, 15*time.Second, "first batch")
	second := receiveWithin(t, h.seen, 15*time.Second, "redelivered batch")
	if !reflect.DeepEqual(ids(first), sorted(a, b)) || !reflect.DeepEqual(ids(second), sorted(a, b)) {
		t.Fatalf("batches %v then %v, want both messages twice", ids(first), ids(second))
	}
	for _, r := range second.Records {
		if r.Attributes["ApproximateReceiveCount"] != "2" {
			t.Errorf("redelivered %s with receive count %s, want 2", r.MessageId, r.Attributes["ApproximateReceiveCount"])
		}
	}
	waitTotal(t, client, q.URL, 0)
	if f := counters.Snapshot().Functions["events"]; f.Invocations != 2 || f.Errors != 1 {
		t.Errorf("counted %+v, want 2 invocations, 1 error", f)
	}
	if l := logs.lines("function failed"); len(l) != 1 || l[0]["function"] != "events" {
		t.Errorf("logged failures %v, want one for events", l)
	}
}

// A panic is recovered and logged, fails the batch, and the poller goes on.
func TestPollerRecoversPanic(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	id := send(t, client, q.URL, "boom", nil)
	h := newScripted(
		func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) { panic("handler bug") },
		succeed,
	)
	logger, logs := newLogger(t)
	counters := local.NewCounters()
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, Wait: time.Second,
		VisibilityTimeout: time.Second, FunctionTimeout: time.Second, Handler: h.handle, Logger: logger, Counters: counters,
	}
	runInBackground(t, p.Run)
	receiveWithin(t, h.seen, 15*time.Second, "first delivery")
	again := receiveWithin(t, h.seen, 15*time.Second, "delivery after the panic")
	if len(again.Records) != 1 || again.Records[0].MessageId != id || again.Records[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("after the panic got %v, want %s again", ids(again), id)
	}
	waitTotal(t, client, q.URL, 0)
	panics := logs.lines("function panicked")
	if len(panics) != 1 || panics[0]["panic"] != "handler bug" || panics[0]["stack"] == "" {
		t.Errorf("panic logs %v, want one with the value and a stack", panics)
	}
	if f := counters.Snapshot().Functions["events"]; f.Errors != 1 {
		t.Errorf("counted %+v, want the panic as an error", f)
	}
}

// An invocation that outlives the function timeout fails, whatever it
// returns afterwards.
func TestPollerTimeoutFailsBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	id := send(t, client, q.URL, "slow", nil)
	h := newScripted(
		func(ctx context.Context, _ events.SQSEvent) (events.SQSEventResponse, error) {
			<-ctx.Done()
			return events.SQSEventResponse{}, nil
		},
		succeed,
	)
	logger, logs := newLogger(t)
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, Wait: time.Second,
		VisibilityTimeout: time.Second, FunctionTimeout: 200 * time.Millisecond, Handler: h.handle, Logger: logger,
	}
	runInBackground(t, p.Run)
	receiveWithin(t, h.seen, 15*time.Second, "first delivery")
	again := receiveWithin(t, h.seen, 15*time.Second, "delivery after the timeout")
	if again.Records[0].MessageId != id || again.Records[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("after the timeout got %v %v, want %s again", ids(again), again.Records[0].Attributes, id)
	}
	waitTotal(t, client, q.URL, 0)
	if l := logs.lines("function timed out"); len(l) != 1 {
		t.Errorf("timeout logs %v, want one", l)
	}
}

// A batch item failure naming no message of the batch fails the whole
// batch, as Lambda does.
func TestPollerUnknownItemIdentifierFailsBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	id := send(t, client, q.URL, "x", nil)
	h := newScripted(
		func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "not-in-batch"}}}, nil
		},
		succeed,
	)
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, Wait: time.Second,
		VisibilityTimeout: time.Second, FunctionTimeout: time.Second, Handler: h.handle,
	}
	runInBackground(t, p.Run)
	receiveWithin(t, h.seen, 15*time.Second, "first delivery")
	again := receiveWithin(t, h.seen, 15*time.Second, "redelivery")
	if again.Records[0].MessageId != id {
		t.Fatalf("redelivery %v, want %s", ids(again), id)
	}
	waitTotal(t, client, q.URL, 0)
}

// Past maxReceiveCount failed deliveries, the queue's redrive moves the
// message to its dead-letter queue, and the handler sees it no more.
func TestPollerFailuresEndInDeadLetterQueue(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{MaxReceiveCount: 2})
	client := newClient(nil)
	id := send(t, client, q.URL, "poison", map[string]string{"run": "r9"})
	h := newScripted(func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
		return events.SQSEventResponse{}, errors.New("always fails")
	})
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, Wait: time.Second,
		VisibilityTimeout: time.Second, FunctionTimeout: time.Second, Handler: h.handle,
	}
	stop := runInBackground(t, p.Run)

	var dead []queue.Message
	eventually(t, 20*time.Second, func() (bool, string) {
		msgs, err := client.Receive(t.Context(), q.DeadLetterURL, queue.ReceiveOptions{Wait: time.Second, VisibilityTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, msgs...)
		return len(dead) > 0, fmt.Sprintf("dead-letter queue empty after %d invocations", h.count())
	})
	stop()
	if len(dead) != 1 || dead[0].ID != id || dead[0].Body != "poison" || dead[0].Attributes["run"] != "r9" {
		t.Fatalf("dead letters %+v, want %s", dead, id)
	}
	if n := h.count(); n != 2 {
		t.Errorf("handler invoked %d times, want maxReceiveCount = 2", n)
	}
	if cnt, err := client.Counts(t.Context(), q.URL); err != nil || cnt.Total() != 0 {
		t.Errorf("source queue holds %+v (%v), want nothing", cnt, err)
	}
}

// Cancelling Run lets the batch in flight finish and be deleted.
func TestPollerStopFinishesInFlightBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	send(t, client, q.URL, "in flight", nil)
	entered := make(chan struct{})
	release := make(chan struct{})
	var handlerCtxErr error
	var finished atomic.Bool
	p := &local.Poller{
		Name: "events", Queue: client, QueueURL: q.URL, Wait: time.Second, FunctionTimeout: 10 * time.Second,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			close(entered)
			<-release
			handlerCtxErr = ctx.Err()
			finished.Store(true)
			return events.SQSEventResponse{}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	receiveWithin(t, entered, 15*time.Second, "invocation")
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) with a batch in flight", err)
	default:
	}
	close(release)
	if err := receiveWithin(t, done, 15*time.Second, "return of Run"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !finished.Load() {
		t.Fatal("Run returned before the handler in flight finished")
	}
	if handlerCtxErr != nil {
		t.Errorf("the handler's context ended with Run's: %v", handlerCtxErr)
	}
	// Deleted before Run returned: no wait needed.
	if cnt, err := client.Counts(t.Context(), q.URL); err != nil || cnt.Total() != 0 {
		t.Errorf("after Run returned the queue holds %+v (%v), want the handled message deleted", cnt, err)
	}
}

// Concurrency runs that many batches at once.
func TestPollerConcurrency(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	client := newClient(nil)
	send(t, client, q.URL, "one", nil)
	send(t, client, q.URL, "two", nil)
	entered := make(chan string, 2)
	release := make(chan struct{})
	p := &local.Poller{
		Name: "worker", Queue: client, QueueURL: q.URL, BatchSize: 1, Wait: time.Second, Concurrency: 2,
		FunctionTimeout: 10 * time.Second,
		Handler: func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			entered <- ev.Records[0].Body
			<-release
			return events.SQSEventResponse{}, nil
		},
	}
	runInBackground(t, p.Run)
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	// Both invocations are in the handler at once, or the second never comes.
	got := []string{receiveWithin(t, entered, 15*time.Second, "first"), receiveWithin(t, entered, 15*time.Second, "second, concurrent")}
	releaseAll()
	slices.Sort(got)
	if !reflect.DeepEqual(got, []string{"one", "two"}) {
		t.Errorf("concurrent batches %v, want one and two", got)
	}
	waitTotal(t, client, q.URL, 0)
}

func TestPollerRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	valid := func() local.Poller {
		return local.Poller{Name: "events", Queue: newClient(nil), QueueURL: "http://127.0.0.1:1/000000000000/q", Handler: succeed}
	}
	for name, mutate := range map[string]func(p *local.Poller){
		"no name":                   func(p *local.Poller) { p.Name = "" },
		"no queue":                  func(p *local.Poller) { p.Queue = nil },
		"no url":                    func(p *local.Poller) { p.QueueURL = "" },
		"no handler":                func(p *local.Poller) { p.Handler = nil },
		"batch of 11":               func(p *local.Poller) { p.BatchSize = 11 },
		"negative batch":            func(p *local.Poller) { p.BatchSize = -1 },
		"window over 5m":            func(p *local.Poller) { p.BatchingWindow = 6 * time.Minute },
		"wait over 20s":             func(p *local.Poller) { p.Wait = 21 * time.Second },
		"visibility under timeout":  func(p *local.Poller) { p.VisibilityTimeout, p.FunctionTimeout = time.Second, 2*time.Second },
		"visibility under default":  func(p *local.Poller) { p.VisibilityTimeout = 10 * time.Second },
		"function timeout over 15m": func(p *local.Poller) { p.FunctionTimeout = 16 * time.Minute },
		"negative concurrency":      func(p *local.Poller) { p.Concurrency = -1 },
		"negative visibility":       func(p *local.Poller) { p.VisibilityTimeout = -time.Second },
		"visibility over 12h":       func(p *local.Poller) { p.VisibilityTimeout = 13 * time.Hour },
		"negative batching window":  func(p *local.Poller) { p.BatchingWindow = -time.Second },
		"negative function timeout": func(p *local.Poller) { p.FunctionTimeout = -time.Second },
	} {
		t.Run(name, func(t *testing.T) {
			p := valid()
			mutate(&p)
			// A valid poller would run until the context ends; an invalid
			// one returns at once, whatever the context.
			if err := p.Run(context.Background()); err == nil {
				t.Fatal("Run accepted the configuration")
			}
		})
	}
}
