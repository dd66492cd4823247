package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// BatchAPI is what a Batcher needs of the adapter; *Client has it.
type BatchAPI interface {
	SendBatch(ctx context.Context, queueURL string, entries []Entry) ([]Result, error)
	DeleteBatch(ctx context.Context, queueURL string, receiptHandles []string) ([]Result, error)
}

var _ BatchAPI = (*Client)(nil)

// Batcher sends to and deletes from one queue through the batch calls,
// coalescing concurrent callers. A call made while none of its kind is in
// flight goes at once, alone: an idle caller waits no longer than with Send
// or Delete. Calls made while one is in flight gather and, when it returns,
// go together in one SendBatch or DeleteBatch (which splits them by SQS's
// limits). Each caller gets its own entry's outcome, exactly what Send or
// Delete would have returned for it; nothing is retried behind its back.
//
// A caller whose context ends while its entry still waits gets the
// context's error and its entry is never sent. Once its entry is in a
// request, the caller waits for that request's outcome, so a reported
// failure always means the entry's own failure. Requests run under a context
// without cancellation derived from the first caller's of the batch.
type Batcher struct {
	sends   coalescer[Entry]
	deletes coalescer[string]
}

// NewBatcher returns a Batcher for the queue at queueURL.
func NewBatcher(api BatchAPI, queueURL string) *Batcher {
	b := &Batcher{}
	b.sends.flush = func(ctx context.Context, entries []Entry) []Result {
		r, _ := api.SendBatch(ctx, queueURL, entries)
		return r
	}
	b.deletes.flush = func(ctx context.Context, handles []string) []Result {
		r, _ := api.DeleteBatch(ctx, queueURL, handles)
		return r
	}
	return b
}

// Send sends one message, as Client.Send does, and returns its id.
func (b *Batcher) Send(ctx context.Context, body string, attrs map[string]string) (string, error) {
	r := b.sends.do(ctx, Entry{Body: body, Attrs: attrs})
	return r.ID, r.Err
}

// Delete deletes the message of one delivery, as Client.Delete does.
func (b *Batcher) Delete(ctx context.Context, receiptHandle string) error {
	return b.deletes.do(ctx, receiptHandle).Err
}

// coalescer gathers the calls of one kind that arrive while a request is in
// flight and sends them together when it returns.
type coalescer[E any] struct {
	flush func(context.Context, []E) []Result

	mu      sync.Mutex
	pending []*call[E]
	busy    bool // a round is running; its end starts the next one
}

type call[E any] struct {
	ctx   context.Context
	entry E
	taken bool // in a request: its outcome will come
	res   Result
	done  chan struct{}
}

func (c *coalescer[E]) do(ctx context.Context, e E) Result {
	cl := &call[E]{ctx: ctx, entry: e, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, cl)
	lead := !c.busy
	c.busy = true
	c.mu.Unlock()
	if lead {
		// Nothing was in flight, so nothing else is pending: this call
		// goes alone, at once.
		c.round()
	}
	select {
	case <-cl.done:
		return cl.res
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !cl.taken {
		c.pending = slices.DeleteFunc(c.pending, func(p *call[E]) bool { return p == cl })
		c.mu.Unlock()
		return Result{Err: ctx.Err()}
	}
	c.mu.Unlock()
	<-cl.done
	return cl.res
}

// round sends everything pending as one batch, then starts the next round
// if calls gathered meanwhile, or marks the coalescer idle.
func (c *coalescer[E]) round() {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	if len(batch) == 0 {
		c.busy = false
		c.mu.Unlock()
		return
	}
	for _, cl := range batch {
		cl.taken = true
	}
	c.mu.Unlock()

	entries := make([]E, len(batch))
	for i, cl := range batch {
		entries[i] = cl.entry
	}
	results := c.flush(context.WithoutCancel(batch[0].ctx), entries)
	for i, cl := range batch {
		if len(results) == len(batch) {
			cl.res = results[i]
		} else {
			cl.res.Err = fmt.Errorf("%w: a batch of %d entries answered with %d results", ErrRequestFailed, len(batch), len(results))
		}
		close(cl.done)
	}

	c.mu.Lock()
	more := len(c.pending) > 0
	if !more {
		c.busy = false
	}
	c.mu.Unlock()
	if more {
		go c.round()
	}
}
