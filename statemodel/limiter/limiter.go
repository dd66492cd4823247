// Package limiter is the pure decision model of a flow-control limiter:
// a concurrency limit, a sliding-window rate limit and the priority order of
// the runs waiting for room. The stores keep one limiter item (this State)
// and one item per waiting run and per admitted run; every change to a
// limiter is a conditional write on its limiter item whose condition is the
// Version read, so admissions are exact however many handlers race.
//
// It is pure: no I/O, no clock reads. Time comes in as an argument.
package limiter

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// MaxWaiting is how many runs may wait in one limiter.
const MaxWaiting = 10_000

// Priority bounds: 1 is admitted first, 5 last; a job's default is 3.
const (
	PriorityFirst   = 1
	PriorityLast    = 5
	PriorityDefault = 3
)

// Bounds of the job and task fields.
const (
	MaxLimit     = 10_000
	MaxRateRuns  = 1000
	MinRatePer   = time.Second
	MaxRatePer   = 24 * time.Hour
	MaxKeyLength = 256
)

// Why a run waits.
const (
	ReasonConcurrency = "concurrency"
	ReasonRateLimit   = "rate_limit"
)

// ErrQueueFull: the limiter already has MaxWaiting runs waiting.
var ErrQueueFull = errors.New("limiter: waiting queue full")

// Name is a limiter's name: the group (or job name) and the rendered key.
func Name(groupOrJob, key string) string { return groupOrJob + "/" + key }

// Rate is a sliding-window rate limit: at most Runs admissions in any
// window of length Per. The zero Rate is no rate limit.
type Rate struct {
	Runs int
	Per  time.Duration
}

// On reports whether the rate limit applies.
func (r Rate) On() bool { return r.Runs > 0 && r.Per > 0 }

// Place is a waiting run's place in its limiter's queue.
type Place struct {
	Priority  int
	CreatedAt time.Time
	RunID     string
}

// Before reports whether p is admitted before q: lower priority number
// first, then older created_at, then the run id.
func (p Place) Before(q Place) bool {
	if p.Priority != q.Priority {
		return p.Priority < q.Priority
	}
	if !p.CreatedAt.Equal(q.CreatedAt) {
		return p.CreatedAt.Before(q.CreatedAt)
	}
	return p.RunID < q.RunID
}

// SortKey renders p so that byte order is admission order: the stores use
// it as the waiting item's sort key.
func (p Place) SortKey() string {
	return fmt.Sprintf("%d#%s#%s", p.Priority, p.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000000Z"), p.RunID)
}

// ParseSortKey is SortKey's inverse.
func ParseSortKey(k string) (Place, error) {
	parts := strings.SplitN(k, "#", 3)
	if len(parts) != 3 || len(parts[0]) != 1 || parts[0][0] < '1' || parts[0][0] > '5' {
		return Place{}, fmt.Errorf("limiter: bad place %q", k)
	}
	at, err := time.Parse("2006-01-02T15:04:05.000000000Z", parts[1])
	if err != nil {
		return Place{}, fmt.Errorf("limiter: bad place %q: %w", k, err)
	}
	return Place{Priority: int(parts[0][0] - '0'), CreatedAt: at, RunID: parts[2]}, nil
}

// State is a limiter item: its concurrency limit (0: none), how many runs
// are active (admitted and not yet released) and waiting, the admission
// times inside the rate window, and the version every write conditions on.
type State struct {
	Limit   int
	Active  int
	Waiting int
	Admits  []time.Time
	Version int64
	// Shards is, on every shard of a group (ShardName), how many shards
	// the group has; 0 on a limiter that is one item. A shard's Limit is
	// its share, exact even at 0 (it lent all of it).
	Shards int
	// Group is, on every shard of a group, the group's limit as its last
	// re-share (Reshare) wrote it: an entry trusts its shard's share while
	// it names the limit the entry expects, and re-shares otherwise. 0 on a
	// limiter that is one item, and on shards stored before it was kept
	// (an entry then re-shares, which records it).
	Group int
}

// limited reports whether s has a concurrency limit: a positive one, or a
// group's shard.
func (s State) limited() bool { return s.Limit > 0 || s.Shards > 1 }

// Room reports whether one more run may be admitted now, and if not, why.
func (s State) Room(r Rate, now time.Time) (bool, string) {
	if s.limited() && s.Active >= s.Limit {
		return false, ReasonConcurrency
	}
	if r.On() && s.inWindow(r, now) >= r.Runs {
		return false, ReasonRateLimit
	}
	return true, ""
}

func (s State) inWindow(r Rate, now time.Time) int {
	n := 0
	for _, t := range s.Admits {
		if now.Sub(t) < r.Per {
			n++
		}
	}
	return n
}

// RateRoomAt is when the rate window next has room (zero: it has room now
// or there is no rate limit). A waiting run's timer is armed for it: no
// write frees rate-limit room.
func (s State) RateRoomAt(r Rate, now time.Time) time.Time {
	if !r.On() || s.inWindow(r, now) < r.Runs {
		return time.Time{}
	}
	// The window is full: room comes when its oldest admission leaves it.
	w := s.window(r, now)
	return w[len(w)-r.Runs].Add(r.Per)
}

func (s State) window(r Rate, now time.Time) []time.Time {
	var w []time.Time
	for _, t := range s.Admits {
		if now.Sub(t) < r.Per {
			w = append(w, t)
		}
	}
	return w
}

// Enter decides a new run: admitted at once when nobody waits and there is
// room, else queued (ErrQueueFull beyond MaxWaiting, maxWaiting in tests).
// It answers the new state, whether the run was admitted and, if not, why.
func (s State) Enter(r Rate, now time.Time, maxWaiting int) (State, bool, string, error) {
	if s.Waiting == 0 {
		if ok, _ := s.Room(r, now); ok {
			return s.admit(r, now), true, "", nil
		}
	}
	if s.Waiting >= maxWaiting {
		return s, false, "", ErrQueueFull
	}
	_, why := s.Room(r, now)
	if why == "" {
		why = ReasonConcurrency // room, but runs ahead of it wait
	}
	n := s.clone()
	n.Waiting++
	n.Version++
	return n, false, why, nil
}

// AdmitWaiting decides the head of the queue (the first waiting run that is
// not paused): admitted when there is room. The caller read s and the head
// together and writes the answer on condition that Version is unchanged.
func (s State) AdmitWaiting(r Rate, now time.Time) (State, bool) {
	if s.Waiting == 0 {
		return s, false
	}
	if ok, _ := s.Room(r, now); !ok {
		return s, false
	}
	n := s.admit(r, now)
	n.Waiting--
	return n, true
}

// Release answers the state after an active run ends.
func (s State) Release() State {
	n := s.clone()
	if n.Active > 0 {
		n.Active--
	}
	n.Version++
	return n
}

// Withdraw answers the state after a waiting run leaves the queue
// (cancelled before admission).
func (s State) Withdraw() State {
	n := s.clone()
	if n.Waiting > 0 {
		n.Waiting--
	}
	n.Version++
	return n
}

// Touch answers the state after a change to the queue that moves no
// counter (a waiting run paused or resumed): a reader of the queue's head
// then finds its condition failed and reads again.
func (s State) Touch() State {
	n := s.clone()
	n.Version++
	return n
}

// SetLimit answers the state with a new limit. Lowering it stops nothing
// already active; raising it makes room for the queue.
func (s State) SetLimit(limit int) State {
	n := s.clone()
	n.Limit = limit
	n.Version++
	return n
}

func (s State) admit(r Rate, now time.Time) State {
	n := s.clone()
	n.Active++
	n.Version++
	if r.On() {
		n.Admits = append(n.window(r, now), now)
		if len(n.Admits) > r.Runs {
			n.Admits = n.Admits[len(n.Admits)-r.Runs:]
		}
	}
	return n
}

func (s State) clone() State {
	s.Admits = append([]time.Time(nil), s.Admits...)
	return s
}

// Span is a half-open interval in which a run (or a task attempt) held
// room in a limiter: from its admission, as its first dispatch shows it,
// to its end.
type Span struct{ From, To time.Time }

// MostBeyond answers the most spans open at one instant beyond limit (an
// end before a start at the same instant): what exactness forbids. Tests
// and benchmarks judge a limiter from the runs' stored times with it.
func MostBeyond(spans []Span, limit int) int {
	type edge struct {
		at time.Time
		d  int
	}
	es := make([]edge, 0, 2*len(spans))
	for _, sp := range spans {
		es = append(es, edge{sp.From, 1}, edge{sp.To, -1})
	}
	slices.SortFunc(es, func(x, y edge) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return x.d - y.d
	})
	n, worst := 0, 0
	for _, e := range es {
		n += e.d
		worst = max(worst, n-limit)
	}
	return worst
}
