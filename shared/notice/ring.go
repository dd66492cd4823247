// Package notice carries the scheduler's notices (protocol.Notice: a run
// that ended, a task that failed or went LOST, a missed deadline) to
// where a person sees them: in AWS an EventBridge bus (EventBridge, behind
// the bounded asynchronous Publisher), on the local stack the log and a
// Ring of the latest ones that GET /v1/events serves.
package notice

import (
	"sync"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

// DefaultKeep is how many notices the local stack keeps.
const DefaultKeep = 1000

// Ring keeps the latest notices in the order they were published. Each
// gets a sequence number, which page tokens carry, so a listing goes on
// from where it stopped even while older entries are overwritten.
type Ring struct {
	mu   sync.Mutex
	buf  []protocol.Notice
	next uint64 // sequence number of the next notice; buf holds next-len .. next-1
	keep int
}

// NewRing keeps the latest keep notices (DefaultKeep when keep < 1).
func NewRing(keep int) *Ring {
	if keep < 1 {
		keep = DefaultKeep
	}
	return &Ring{keep: keep}
}

// Publish keeps note, forgetting the oldest beyond the ring's size. It
// never blocks on anything but the ring's own lock.
func (r *Ring) Publish(note protocol.Notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) < r.keep {
		r.buf = append(r.buf, note)
	} else {
		r.buf[r.next%uint64(r.keep)] = note
	}
	r.next++
}

// Since lists at most limit kept notices published at or after since
// (zero: every kept one), oldest first, starting at the token's position
// when token is not "" (a token from an earlier answer; ahead of
// everything kept it lists nothing). next is the token of the page after
// this one, or "" when nothing more is kept yet.
func (r *Ring) Since(since time.Time, limit int, token string) (notes []protocol.Notice, next string, err error) {
	from := uint64(0)
	if token != "" {
		if from, err = protocol.ParseNoticeToken(token); err != nil {
			return nil, "", err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := r.next - uint64(len(r.buf))
	notes = []protocol.Notice{}
	for seq := max(from, oldest); seq < r.next; seq++ {
		note := r.buf[seq%uint64(r.keep)]
		if note.Time.Before(since) {
			continue
		}
		if len(notes) == limit {
			return notes, protocol.NoticeToken(seq), nil
		}
		notes = append(notes, note)
	}
	return notes, "", nil
}
