package notice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/runledger/runledger/shared/notice"
	"github.com/runledger/runledger/shared/protocol"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func note(i int) protocol.Notice {
	return protocol.Notice{Type: protocol.NoticeRunFailed, Time: t0.Add(time.Duration(i) * time.Second), Job: "nightly",
		Run: fmt.Sprintf("run%04d", i), State: "FAILED", Reason: "tasks: load FAILED"}
}

// TestRingSinceAndPages: since is inclusive, pages go on from their
// token, the oldest entries beyond the ring's size are forgotten, and a
// bad token is a field error naming next_token.
func TestRingSinceAndPages(t *testing.T) {
	r := notice.NewRing(5)
	for i := range 8 {
		r.Publish(note(i))
	}
	all, next, err := r.Since(time.Time{}, 100, "")
	if err != nil || next != "" || len(all) != 5 || all[0].Run != "run0003" || all[4].Run != "run0007" {
		t.Fatalf("all kept: %v %q %v, want run0003..run0007 oldest first", all, next, err)
	}
	from, _, _ := r.Since(t0.Add(6*time.Second), 100, "")
	if len(from) != 2 || from[0].Run != "run0006" {
		t.Fatalf("since the 7th's time: %v, want run0006 and run0007 (inclusive)", from)
	}
	page, next, err := r.Since(time.Time{}, 2, "")
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("first page: %v %q %v", page, next, err)
	}
	r.Publish(note(8))
	rest, last, err := r.Since(time.Time{}, 100, next)
	if err != nil || last != "" || len(rest) != 4 || rest[0].Run != "run0005" || rest[3].Run != "run0008" {
		t.Fatalf("from the token: %v %q %v, want run0005..run0008", rest, last, err)
	}
	var fe *protocol.FieldError
	if _, _, err := r.Since(time.Time{}, 10, "x"); !errors.As(err, &fe) || fe.Field != "next_token" {
		t.Fatalf("bad token: %v, want a field error on next_token", err)
	}
}

// recordingSink records the batches it is given; it blocks while gate is
// open (nil: never).
type recordingSink struct {
	mu      sync.Mutex
	batches [][]protocol.Notice
	gate    chan struct{}
}

func (s *recordingSink) Send(ctx context.Context, batch []protocol.Notice) error {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches = append(s.batches, append([]protocol.Notice(nil), batch...))
	return nil
}

// TestPublisherBatchesAndFlushes: 25 notices are delivered in batches of
// at most 10, all of them once Flush returns.
func TestPublisherBatchesAndFlushes(t *testing.T) {
	sink := &recordingSink{}
	p := notice.NewPublisher(sink, notice.Options{})
	defer p.Close(context.Background())
	for i := range 25 {
		p.Publish(note(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	n := 0
	for _, b := range sink.batches {
		if len(b) > notice.MaxBatch {
			t.Errorf("a batch of %d", len(b))
		}
		for _, s := range b {
			if s.Run != fmt.Sprintf("run%04d", n) {
				t.Fatalf("delivered %s as number %d", s.Run, n)
			}
			n++
		}
	}
	if sent, failed, dropped := p.Counts(); n != 25 || sent != 25 || failed != 0 || dropped != 0 {
		t.Fatalf("delivered %d (counts %d/%d/%d), want 25 sent", n, sent, failed, dropped)
	}
}

// TestPublisherNeverBlocks: with the sink stuck, Publish returns at once
// and a full buffer drops (counted); Flush is bounded by its context.
func TestPublisherNeverBlocks(t *testing.T) {
	sink := &recordingSink{gate: make(chan struct{})}
	p := notice.NewPublisher(sink, notice.Options{Buffer: 4})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			p.Publish(note(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked on a stuck sink")
	}
	if _, _, dropped := p.Counts(); dropped < 50-4-notice.MaxBatch {
		t.Fatalf("dropped %d of 50 with a buffer of 4, want at least %d", dropped, 50-4-notice.MaxBatch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("flush with a stuck sink: %v, want its deadline", err)
	}
	close(sink.gate)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// putEventsRequest is the EventBridge JSON 1.1 request body as recorded.
type putEventsRequest struct {
	Entries []struct {
		Source, DetailType, Detail, EventBusName string
		Time                                     *float64
	}
}

// TestEventBridgePutEvents speaks EventBridge's JSON 1.1 protocol: the
// request's target, the entries' source, detail-type, detail and bus are
// checked, and an entry refused the first time is sent once more.
func TestEventBridgePutEvents(t *testing.T) {
	var mu sync.Mutex
	var got []putEventsRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tgt := r.Header.Get("X-Amz-Target"); tgt != "AWSEvents.PutEvents" {
			http.Error(w, "target "+tgt, http.StatusBadRequest)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-amz-json-1.1" {
			http.Error(w, "content type "+ct, http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req putEventsRequest
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, req)
		first := len(got) == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if first && len(req.Entries) > 1 {
			// The second entry is throttled once.
			_, _ = io.WriteString(w, `{"FailedEntryCount":1,"Entries":[{"EventId":"e1"},{"ErrorCode":"ThrottlingException","ErrorMessage":"slow down"},{"EventId":"e3"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"FailedEntryCount":0,"Entries":[{"EventId":"e2"}]}`)
	}))
	defer srv.Close()
	client := eventbridge.New(eventbridge.Options{
		Region: "eu-west-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
	})
	eb := notice.EventBridge{Client: client, Bus: "runledger-events"}
	batch := []protocol.Notice{note(1), {Type: protocol.NoticeTaskLost, Time: t0, Job: "nightly", Run: "run0002", Task: "load", Attempt: 2, State: "LOST", Reason: "lease expired"}, note(3)}
	if err := eb.Send(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[0].Entries) != 3 || len(got[1].Entries) != 1 {
		t.Fatalf("requests %+v, want 3 entries then the refused one again", got)
	}
	for i, e := range got[0].Entries {
		if e.Source != "runledger" || e.EventBusName != "runledger-events" || e.DetailType != string(batch[i].Type) || e.Time == nil {
			t.Errorf("entry %d: %+v", i, e)
		}
		var detail map[string]any
		if err := json.Unmarshal([]byte(e.Detail), &detail); err != nil || detail["run"] != batch[i].Run || detail["type"] != string(batch[i].Type) {
			t.Errorf("entry %d's detail %s (%v), want the notice of %s", i, e.Detail, err, batch[i].Run)
		}
	}
	var lost map[string]any
	_ = json.Unmarshal([]byte(got[1].Entries[0].Detail), &lost)
	if lost["task"] != "load" || lost["attempt"] != float64(2) || lost["state"] != "LOST" || lost["reason"] != "lease expired" {
		t.Errorf("the retried entry's detail %v, want the task.lost notice", lost)
	}
	if _, ok := lost["time"].(string); !ok {
		t.Errorf("detail time %v, want an RFC 3339 string", lost["time"])
	}
	if err := eb.Send(context.Background(), make([]protocol.Notice, notice.MaxBatch+1)); err == nil {
		t.Error("11 entries in one call were sent")
	}
}
