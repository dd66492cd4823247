package notice

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

// MaxBatch is the most notices one delivery carries: EventBridge's
// PutEvents takes at most 10 entries a call.
const MaxBatch = 10

// Sink delivers one batch of at most MaxBatch notices (EventBridge).
type Sink interface {
	Send(ctx context.Context, batch []protocol.Notice) error
}

// Options configure a Publisher. Zero values take the defaults.
type Options struct {
	// Buffer is how many notices may wait for delivery (default 1,000);
	// beyond it a notice is dropped, counted and warned about.
	Buffer int
	// SendTimeout bounds one delivery (default 5 s).
	SendTimeout time.Duration
	Logger      *slog.Logger
}

// Publisher delivers notices to a Sink in the background, in batches of at
// most MaxBatch, so that the transition that raised a notice never waits
// on the delivery: Publish only puts the notice in a bounded buffer, and
// drops it (counted, with a warning) when the buffer is full. In Lambda,
// where the process is frozen between invocations, the entry calls Flush
// before it returns, bounded by time.
type Publisher struct {
	sink    Sink
	opts    Options
	ch      chan protocol.Notice
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once

	dropped, sent, failed atomic.Uint64
}

// NewPublisher starts a publisher delivering to sink; Close stops it.
func NewPublisher(sink Sink, opts Options) *Publisher {
	if opts.Buffer < 1 {
		opts.Buffer = 1000
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{
		sink: sink, opts: opts, ch: make(chan protocol.Notice, opts.Buffer),
		flushes: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go p.run()
	return p
}

// Publish queues note for delivery and returns at once.
func (p *Publisher) Publish(note protocol.Notice) {
	select {
	case p.ch <- note:
	default:
		n := p.dropped.Add(1)
		if n == 1 || n%100 == 0 {
			p.opts.Logger.Warn("notice dropped: the publisher's buffer is full",
				"type", string(note.Type), "run_id", note.Run, "dropped", n, "buffer", p.opts.Buffer)
		}
	}
}

// Flush delivers every notice published before the call, and returns when
// they are delivered (or failed) or when ctx ends, whichever comes first.
func (p *Publisher) Flush(ctx context.Context) error {
	req := make(chan struct{})
	select {
	case p.flushes <- req:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-req:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close delivers what is queued (bounded by ctx) and stops the publisher.
func (p *Publisher) Close(ctx context.Context) error {
	err := p.Flush(ctx)
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return err
}

// Counts reports how many notices were delivered, failed to deliver, and
// were dropped for a full buffer.
func (p *Publisher) Counts() (sent, failed, dropped uint64) {
	return p.sent.Load(), p.failed.Load(), p.dropped.Load()
}

func (p *Publisher) run() {
	defer close(p.done)
	for {
		select {
		case note := <-p.ch:
			p.deliver(p.drain([]protocol.Notice{note}))
		case req := <-p.flushes:
			p.deliver(p.drain(nil))
			close(req)
		case <-p.stop:
			return
		}
	}
}

// drain adds every notice waiting in the buffer now.
func (p *Publisher) drain(batch []protocol.Notice) []protocol.Notice {
	for {
		select {
		case note := <-p.ch:
			batch = append(batch, note)
		default:
			return batch
		}
	}
}

// deliver sends notes in batches of at most MaxBatch. A failed batch is
// logged and counted, not retried here: the sink retries what it can.
func (p *Publisher) deliver(notes []protocol.Notice) {
	for len(notes) > 0 {
		n := min(len(notes), MaxBatch)
		batch := notes[:n]
		notes = notes[n:]
		ctx, cancel := context.WithTimeout(context.Background(), p.opts.SendTimeout)
		err := p.sink.Send(ctx, batch)
		cancel()
		failed := n
		var partial *FailedEntriesError
		if errors.As(err, &partial) {
			failed = partial.Failed
		}
		if err != nil {
			p.failed.Add(uint64(failed))
			p.opts.Logger.Warn("notices not delivered", "notices", failed, "error", err.Error())
		} else {
			failed = 0
		}
		p.sent.Add(uint64(n - failed))
	}
}
