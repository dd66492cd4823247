package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/queue"
)

// memQueue is the scheduler's queue in memory, for the tests that need no
// SQS semantics: each queue hands out its messages once, in the order they
// became visible (a received message never reappears, whether deleted or
// not), a delayed message becomes visible after its delay by the real
// clock, and a send to a queue that was not created fails as SQS's does.
type memQueue struct {
	mu      sync.Mutex
	queues  map[string][]memMessage
	seq     int
	arrived chan struct{} // closed and replaced on every send
	// batches records the size of every SendBatch call.
	batches []int
}

type memMessage struct {
	queue.Message
	visibleAt time.Time
}

func newMemQueue() *memQueue {
	return &memQueue{queues: map[string][]memMessage{}, arrived: make(chan struct{})}
}

// create makes a queue and returns its URL.
func (q *memQueue) create(name string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	url := "mem://queue/" + name
	q.queues[url] = nil
	return url
}

func (q *memQueue) Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error) {
	return q.SendDelayed(ctx, queueURL, body, attrs, 0)
}

// SendBatch sends each entry as SendDelayed does, and records the call.
func (q *memQueue) SendBatch(ctx context.Context, queueURL string, entries []queue.Entry) ([]queue.Result, error) {
	q.mu.Lock()
	q.batches = append(q.batches, len(entries))
	q.mu.Unlock()
	out := make([]queue.Result, len(entries))
	for i, e := range entries {
		out[i].ID, out[i].Err = q.SendDelayed(ctx, queueURL, e.Body, e.Attrs, e.Delay)
	}
	return out, nil
}

func (q *memQueue) batchSizes() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]int(nil), q.batches...)
}

func (q *memQueue) SendDelayed(ctx context.Context, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs, ok := q.queues[queueURL]
	if !ok {
		return "", fmt.Errorf("send to %s: the queue does not exist", queueURL)
	}
	q.seq++
	id := fmt.Sprintf("mem-%d", q.seq)
	now := time.Now()
	q.queues[queueURL] = append(msgs, memMessage{
		Message:   queue.Message{ID: id, ReceiptHandle: "receipt-" + id, Body: body, Attributes: attrs, ReceiveCount: 1, SentAt: now},
		visibleAt: now.Add(delay),
	})
	close(q.arrived)
	q.arrived = make(chan struct{})
	return id, nil
}

// Receive takes up to opts.MaxMessages visible messages, waiting up to
// opts.Wait for the first.
func (q *memQueue) Receive(ctx context.Context, queueURL string, opts queue.ReceiveOptions) ([]queue.Message, error) {
	limit := max(opts.MaxMessages, 1)
	deadline := time.NewTimer(opts.Wait)
	defer deadline.Stop()
	for {
		got, arrived, err := q.take(queueURL, limit)
		if err != nil || len(got) > 0 {
			return got, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, nil
		case <-arrived:
		case <-time.After(10 * time.Millisecond): // a delayed message's time may come
		}
	}
}

func (q *memQueue) take(queueURL string, limit int) ([]queue.Message, <-chan struct{}, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	msgs, ok := q.queues[queueURL]
	if !ok {
		return nil, nil, fmt.Errorf("receive from %s: the queue does not exist", queueURL)
	}
	now := time.Now()
	var got []queue.Message
	kept := msgs[:0]
	for _, m := range msgs {
		if len(got) < limit && !m.visibleAt.After(now) {
			got = append(got, m.Message)
			continue
		}
		kept = append(kept, m)
	}
	q.queues[queueURL] = kept
	return got, q.arrived, nil
}

// Delete acknowledges a received message; received messages are gone
// already.
// bodies lists the bodies queueURL holds, visible or not.
func (q *memQueue) bodies(queueURL string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, m := range q.queues[queueURL] {
		out = append(out, m.Body)
	}
	return out
}

func (q *memQueue) Delete(context.Context, string, string) error { return nil }
