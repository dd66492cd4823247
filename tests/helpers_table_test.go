package tests

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

// stepClock is a clock a test injects into the scheduler (devstack
// Options.Now). Frozen, it stands at the time Set gives it; running, it is
// real time plus an offset. Add moves it forward either way.
type stepClock struct {
	mu     sync.Mutex
	frozen time.Time
	offset time.Duration
}

// frozenAt returns a clock that stands still at t until moved.
func frozenAt(t time.Time) *stepClock { return &stepClock{frozen: t.UTC()} }

// runningClock returns a clock that runs with real time until moved ahead.
func runningClock() *stepClock { return &stepClock{} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen.IsZero() {
		return c.frozen
	}
	return time.Now().Add(c.offset).UTC()
}

// Set moves a frozen clock to t.
func (c *stepClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen.IsZero() {
		panic("stepClock.Set on a running clock")
	}
	c.frozen = t.UTC()
}

// Add moves the clock d ahead.
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen.IsZero() {
		c.offset += d
		return
	}
	c.frozen = c.frozen.Add(d)
}

// tableItems reads every item of the stack's table with a consistent Scan
// and renders each canonically, keyed by "pk | sk": two reads are equal
// exactly when nothing was written in between (a test may Scan; the
// product never does).
func (s *stack) tableItems() map[string]string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := s.Stack.Env.DynamoDBClient()
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(s.Info.Table), ConsistentRead: aws.Bool(true)})
	out := map[string]string{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			s.t.Fatalf("scan %s: %v", s.Info.Table, err)
		}
		for _, it := range page.Items {
			var b strings.Builder
			renderAttr(&b, &types.AttributeValueMemberM{Value: it})
			out[attrString(it["pk"])+" | "+attrString(it["sk"])] = b.String()
		}
	}
	return out
}

func attrString(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return fmt.Sprintf("%T", v)
}

// renderAttr writes v with map keys and sets sorted.
func renderAttr(b *strings.Builder, v types.AttributeValue) {
	switch x := v.(type) {
	case *types.AttributeValueMemberS:
		fmt.Fprintf(b, "S%q", x.Value)
	case *types.AttributeValueMemberN:
		fmt.Fprintf(b, "N%s", x.Value)
	case *types.AttributeValueMemberB:
		fmt.Fprintf(b, "B%s", base64.StdEncoding.EncodeToString(x.Value))
	case *types.AttributeValueMemberBOOL:
		fmt.Fprintf(b, "BOOL%v", x.Value)
	case *types.AttributeValueMemberNULL:
		b.WriteString("NULL")
	case *types.AttributeValueMemberSS:
		fmt.Fprintf(b, "SS%q", slices.Sorted(slices.Values(x.Value)))
	case *types.AttributeValueMemberNS:
		fmt.Fprintf(b, "NS%q", slices.Sorted(slices.Values(x.Value)))
	case *types.AttributeValueMemberBS:
		var enc []string
		for _, v := range x.Value {
			enc = append(enc, base64.StdEncoding.EncodeToString(v))
		}
		sort.Strings(enc)
		fmt.Fprintf(b, "BS%q", enc)
	case *types.AttributeValueMemberL:
		b.WriteString("L[")
		for i, e := range x.Value {
			if i > 0 {
				b.WriteByte(',')
			}
			renderAttr(b, e)
		}
		b.WriteByte(']')
	case *types.AttributeValueMemberM:
		b.WriteString("M{")
		for i, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range x.Value {
				if !yield(k) {
					return
				}
			}
		}) {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, "%q:", k)
			renderAttr(b, x.Value[k])
		}
		b.WriteByte('}')
	default:
		fmt.Fprintf(b, "?%T", v)
	}
}

// tableDiff describes how two tableItems reads differ ("" when equal).
func tableDiff(before, after map[string]string) string {
	var d []string
	for k, v := range after {
		old, ok := before[k]
		switch {
		case !ok:
			d = append(d, "added "+k)
		case old != v:
			d = append(d, "changed "+k+":\n  before "+old+"\n  after  "+v)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			d = append(d, "removed "+k)
		}
	}
	sort.Strings(d)
	return strings.Join(d, "\n")
}

// queueCounts reads the message counts of every queue of the stack.
func (s *stack) queueCounts() map[string]queue.Counts {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]queue.Counts{}
	for name, url := range s.Info.Queues {
		c, err := s.Queue.Counts(ctx, url)
		if err != nil {
			s.t.Fatalf("count %s: %v", name, err)
		}
		out[name] = c
	}
	return out
}

// launchWorker runs an SDK worker on pool against the stack's current URL
// and returns a function that stops it (the worker drains: running
// handlers may finish and report). It is stopped when the test ends in any
// case. clock, if not nil, stamps the worker's event times.
func (s *stack) launchWorker(pool, name string, concurrency int, clock func() time.Time, h worker.Handler) (stop func()) {
	s.t.Helper()
	_, stop = s.runWorker(pool, worker.Config{Name: name, Concurrency: concurrency, Clock: clock}, h)
	return stop
}

// handlerLog counts, under a lock, what a worker handler did.
type handlerLog struct {
	mu    sync.Mutex
	calls map[string]int    // "<run>/<task>" -> handler calls
	seen  map[string]string // "<run>/<task>" -> payload the handler saw
}

func newHandlerLog() *handlerLog {
	return &handlerLog{calls: map[string]int{}, seen: map[string]string{}}
}

func (l *handlerLog) record(t worker.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := t.Run + "/" + t.Task
	l.calls[k]++
	l.seen[k] = string(t.Payload)
}

func (l *handlerLog) count(run, task string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[run+"/"+task]
}

func (l *handlerLog) payload(run, task string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[run+"/"+task]
}

// parseTime reads an API time, failing the test on a bad one.
func parseTime(t *testing.T, s *string, what string) time.Time {
	t.Helper()
	if s == nil {
		t.Fatalf("%s: no time", what)
	}
	v, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// oneSentence checks that an error message is one human sentence.
func oneSentence(t *testing.T, what string, r reply) {
	t.Helper()
	msg, _ := r.Body["message"].(string)
	body := strings.TrimSuffix(msg, ".")
	if msg == "" || !strings.HasSuffix(msg, ".") || strings.ContainsAny(body, "\n") || strings.Contains(body, ". ") {
		t.Errorf("%s: message %q is not one sentence", what, msg)
	}
}
