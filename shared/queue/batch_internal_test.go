package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// TestChunks: requests hold at most MaxBatchEntries entries and, with a
// size, at most the limit together; order is kept.
func TestChunks(t *testing.T) {
	t.Parallel()
	var all []int
	for i := range 23 {
		all = append(all, i)
	}
	got := chunks(all, nil, 0)
	if len(got) != 3 || len(got[0]) != 10 || len(got[1]) != 10 || !slices.Equal(got[2], []int{20, 21, 22}) {
		t.Fatalf("23 entries: %v", got)
	}
	sizes := []int{100, 100, 100, 250, 10}
	got = chunks([]int{0, 1, 2, 3, 4}, func(i int) int { return sizes[i] }, 256)
	want := [][]int{{0, 1}, {2}, {3}, {4}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("by size: %v, want %v", got, want)
	}
}

// TestSendBatchEntryFailures: an answer that fails some entries gives
// those entries SQS's reason, as the package's error, and the others
// their ids; an entry the answer leaves out is a failure too.
func TestSendBatchEntryFailures(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), "SendMessageBatch") || !strings.Contains(string(body), `"Id":"2"`) {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		fmt.Fprint(w, `{"Successful":[{"Id":"0","MessageId":"m-0","MD5OfMessageBody":"x"}],
			"Failed":[{"Id":"1","Code":"InvalidMessageContents","Message":"bad characters","SenderFault":true}]}`)
	}))
	defer srv.Close()
	c := New(sqs.New(sqs.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), Credentials: aws.AnonymousCredentials{},
		DisableMessageChecksumValidation: true,
	}))
	results, err := c.SendBatch(t.Context(), srv.URL+"/000000000000/q", []Entry{{Body: "a"}, {Body: "b"}, {Body: "c"}})
	if err == nil || len(results) != 3 {
		t.Fatalf("SendBatch: %+v %v", results, err)
	}
	if results[0].ID != "m-0" || results[0].Err != nil {
		t.Errorf("entry 0: %+v", results[0])
	}
	if !errors.Is(results[1].Err, ErrInvalidMessage) || !strings.Contains(results[1].Err.Error(), "bad characters") {
		t.Errorf("entry 1: %+v", results[1])
	}
	if !errors.Is(results[2].Err, ErrRequestFailed) {
		t.Errorf("entry 2, left out of the answer: %+v", results[2])
	}
}

// fakeBatchAPI records the batches it gets; hold, while set, keeps a
// request in flight until it is closed.
type fakeBatchAPI struct {
	mu      sync.Mutex
	sends   [][]Entry
	deletes [][]string
	hold    chan struct{}
	fail    func(body string) error
}

func (f *fakeBatchAPI) SendBatch(ctx context.Context, queueURL string, entries []Entry) ([]Result, error) {
	f.mu.Lock()
	f.sends = append(f.sends, slices.Clone(entries))
	n, hold, fail := len(f.sends), f.hold, f.fail
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	out := make([]Result, len(entries))
	for i, e := range entries {
		if fail != nil {
			if err := fail(e.Body); err != nil {
				out[i].Err = err
				continue
			}
		}
		out[i].ID = fmt.Sprintf("id-%d-%s", n, e.Body)
	}
	return out, nil
}

func (f *fakeBatchAPI) DeleteBatch(ctx context.Context, queueURL string, handles []string) ([]Result, error) {
	f.mu.Lock()
	f.deletes = append(f.deletes, slices.Clone(handles))
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return make([]Result, len(handles)), nil
}

func (f *fakeBatchAPI) sendBatches() [][]Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sends)
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *coalescer[E]) pendingLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// TestBatcherIdleSendGoesAlone: with nothing in flight a send is one
// request of its own, at once.
func TestBatcherIdleSendGoesAlone(t *testing.T) {
	t.Parallel()
	f := &fakeBatchAPI{}
	b := NewBatcher(f, "q")
	for i := range 3 {
		id, err := b.Send(t.Context(), fmt.Sprint(i), nil)
		if err != nil || id != fmt.Sprintf("id-%d-%d", i+1, i) {
			t.Fatalf("send %d: %q %v", i, id, err)
		}
	}
	if got := f.sendBatches(); len(got) != 3 {
		t.Fatalf("three sequential sends made %d requests, want 3", len(got))
	}
}

// TestBatcherCoalescesWhileInFlight: sends made while one is in flight
// gather and go as one batch when it returns; each caller gets its own
// entry's outcome, a failed entry its own error only.
func TestBatcherCoalescesWhileInFlight(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	f := &fakeBatchAPI{hold: hold, fail: func(body string) error {
		if body == "b3" {
			return ErrPayloadTooLarge
		}
		return nil
	}}
	b := NewBatcher(f, "q")
	first := make(chan error, 1)
	go func() {
		_, err := b.Send(context.Background(), "first", nil)
		first <- err
	}()
	waitFor(t, "the first request", func() bool { return len(f.sendBatches()) == 1 })

	const n = 12
	type outcome struct {
		id  string
		err error
	}
	outcomes := make([]chan outcome, n)
	for i := range n {
		outcomes[i] = make(chan outcome, 1)
		go func() {
			id, err := b.Send(context.Background(), fmt.Sprintf("b%d", i), nil)
			outcomes[i] <- outcome{id, err}
		}()
	}
	waitFor(t, "the sends to gather", func() bool { return b.sends.pendingLen() == n })
	close(hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i := range n {
		o := <-outcomes[i]
		if i == 3 {
			if !errors.Is(o.err, ErrPayloadTooLarge) || o.id != "" {
				t.Errorf("b3: %+v, want its own failure", o)
			}
			continue
		}
		if o.err != nil || o.id != fmt.Sprintf("id-2-b%d", i) {
			t.Errorf("b%d: %+v, want its id from the second request", i, o)
		}
	}
	batches := f.sendBatches()
	if len(batches) != 2 || len(batches[1]) != n {
		t.Fatalf("requests %d, the second of %d entries; want 2 and %d", len(batches), len(batches[len(batches)-1]), n)
	}
}

// TestBatcherCancelledWhileWaiting: a caller whose context ends before its
// entry is taken gets the context's error, and the entry is never sent.
func TestBatcherCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	f := &fakeBatchAPI{hold: hold}
	b := NewBatcher(f, "q")
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Delete(context.Background(), "first")
	}()
	waitFor(t, "the first request", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.deletes) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	var got atomic.Value
	cancelled := make(chan struct{})
	go func() {
		defer close(cancelled)
		got.Store(fmt.Sprint(b.Delete(ctx, "dropped")))
	}()
	waitFor(t, "the second delete to wait", func() bool { return b.deletes.pendingLen() == 1 })
	cancel()
	<-cancelled
	if got.Load() != context.Canceled.Error() {
		t.Fatalf("cancelled delete: %v, want %v", got.Load(), context.Canceled)
	}
	close(hold)
	<-done
	if err := b.Delete(context.Background(), "after"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fmt.Sprint(f.deletes) != "[[first] [after]]" {
		t.Fatalf("delete requests %v: the cancelled entry must never go", f.deletes)
	}
}
