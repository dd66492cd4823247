package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel/limiter"
)

// Limiters keeps flow-control limiters (statemodel/limiter): one limiter
// item (its limit, how many runs are active and waiting, the admissions in
// the rate window and a version), one waiting item per run in its queue,
// kept in admission order, and one admitted item per active run, all under
// the limiter's one partition key. A store only reads and writes; the
// decisions are the limiter model's, taken by this package's Turns
// (EnterLimiter, AdmitNext, LeaveLimiter and the rest) between a read and a
// conditional write, so every admission is a conditional write on the
// limiter item.
type Limiters interface {
	// GetLimiter reads a limiter item; a limiter never written is the zero
	// State (Version 0).
	GetLimiter(ctx context.Context, name string) (limiter.State, error)
	// GetLimiters reads several limiter items in one consistent read (a
	// group's shards), answered in the order of names; a limiter never
	// written is the zero State.
	GetLimiters(ctx context.Context, names []string) ([]limiter.State, error)
	// ListWaiting reads the first limit waiting items in admission order.
	ListWaiting(ctx context.Context, name string, limit int) ([]Waiting, error)
	// ListAdmitted reads the admitted items (the active runs), by run id.
	ListAdmitted(ctx context.Context, name string) ([]Admitted, error)
	// FindRun reads a run's admitted item and its waiting item at place
	// (nil when absent): two key reads, whatever the queue's length.
	FindRun(ctx context.Context, name string, place limiter.Place) (*Admitted, *Waiting, error)
	// WriteLimiter writes w in one atomic write whose conditions are: the
	// limiter item's version is still w.Expected (0: no item), each put
	// waiting or admitted item is new and each deleted one is there. A
	// failed condition is ErrVersionConflict and writes nothing; a run
	// w.LiveRun names that is gone or ended is ErrConflict.
	WriteLimiter(ctx context.Context, w LimiterWrite) error
	// WriteShares writes several limiter items of one group (a borrow's
	// two shards, a re-share's every shard) in one atomic write, each on
	// condition that its version is still Expected (0: no item). A failed
	// condition is ErrVersionConflict and writes nothing. It touches no
	// waiting or admitted item.
	WriteShares(ctx context.Context, ws []ShareWrite) error
}

// ShareWrite is one limiter item of a group write (Limiters.WriteShares).
type ShareWrite struct {
	Name     string
	Expected int64
	State    limiter.State
}

// Waiting is a run waiting in a limiter's queue.
type Waiting struct {
	limiter.Place
	Paused bool
	// MarkRun: the holder is a run whose item keeps its admission
	// (Entry.MarkRun): the hand-off that admits it marks it.
	MarkRun bool
}

// RunMark is a run's admission as its run item keeps it: At is when the
// write's limiter admitted it (Run.AdmittedAt and AdmittedIn, WaitingIn
// cleared), zero when it waits there (Run.WaitingIn; its last admission
// kept).
type RunMark struct {
	RunID string
	At    time.Time
}

// Admitted is a run active in a limiter.
type Admitted struct {
	RunID      string
	AdmittedAt time.Time
}

// LimiterWrite is one conditional write of a limiter: its new State and
// the waiting and admitted items it adds, replaces or removes.
type LimiterWrite struct {
	Name     string
	Expected int64
	State    limiter.State
	// PutWaiting adds a waiting item (condition: new) unless Replace,
	// which overwrites one that is there (pause, resume).
	PutWaiting    *Waiting
	Replace       bool
	DeleteWaiting *limiter.Place
	PutAdmitted   *Admitted
	// DeleteAdmitted is a run id whose admitted item must be there.
	DeleteAdmitted string
	// AbsentWaiting and AbsentAdmitted are items that must not be there
	// (an entry: the run is in the limiter once, waiting or admitted).
	AbsentWaiting  *limiter.Place
	AbsentAdmitted string
	// LiveRun is a run id whose run must be there and not ended (an
	// entry of a run that may be cancelled meanwhile: a run that ended
	// before its entry would hold its room with nobody to give it back).
	LiveRun string
	// Mark records on the run item where the write leaves the run
	// (Run.AdmittedAt, AdmittedIn and WaitingIn). The run item must be
	// there (and, when LiveRun names the same run, not ended: one write of
	// the run item).
	Mark *RunMark
	// Also are other runs' item changes made in the same write, under the
	// same conditions (the entries or leaves a turn's holder writes with
	// its own); their Name, Expected, State and Also are not used. Each
	// run appears once in a write.
	Also []LimiterWrite
}

// ErrLimitQueueFull: a limiter already has limiter.MaxWaiting runs
// waiting; the API answers 429 limit_queue_full.
var ErrLimitQueueFull = protocol.NewError(protocol.CodeLimitQueueFull, "limit queue full",
	"The run's limiter already has 10,000 runs waiting; nothing was written.")

// limiterRetries bounds the read-decide-write rounds of one limiter
// operation under contention.
const limiterRetries = 64

// CheckLimiterName refuses a limiter name no key can hold.
func CheckLimiterName(name string) error {
	return CheckTail("limiter", name, "LIMITER#"+name, MaxPartitionKeyBytes)
}

// CheckShareWrite refuses a group write no store can make: no item, a
// name no key holds, or one item twice (DynamoDB refuses a transaction
// that names one item twice).
func CheckShareWrite(ws []ShareWrite) error {
	if len(ws) == 0 {
		return fmt.Errorf("%w: a group write of no limiter", ErrInvalidInput)
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if err := CheckLimiterName(w.Name); err != nil {
			return err
		}
		if seen[w.Name] {
			return fmt.Errorf("%w: limiter %s twice in one group write", ErrInvalidInput, w.Name)
		}
		seen[w.Name] = true
	}
	return nil
}

// QueueFull reports whether limiter name has limiter.MaxWaiting runs
// waiting, the look a new run's creator takes before writing anything. It
// reads the limiter unless this process wrote it within the last second
// and left at least queueFullMargin places free: one limiter item takes at
// most 1,000 writes a second in AWS (docs/store.md), so no writer anywhere
// filled them since. The look is advisory either way: the entry's own
// conditional write refuses a run beyond the bound.
func (t *Turns) QueueFull(ctx context.Context, s Limiters, name string) (bool, error) {
	if waiting, ok := t.seenLately(s, name, time.Second); ok && waiting <= limiter.MaxWaiting-queueFullMargin {
		return false, nil
	}
	st, err := s.GetLimiter(ctx, name)
	if err != nil {
		return false, err
	}
	return st.Waiting >= limiter.MaxWaiting, nil
}

// queueFullMargin is the free places below which QueueFull reads: more
// than one limiter item takes writes in a second.
const queueFullMargin = 1000

// Entry is a new run entering a limiter.
type Entry struct {
	Limiter string
	Limit   int // 0: no concurrency limit
	Rate    limiter.Rate
	Place   limiter.Place
	// Live: the entry lands only while the run is there and not ended
	// (LimiterWrite.LiveRun); otherwise EnterLimiter answers ErrRunEnded.
	// An operator's retry enters an ended run before it reopens it, so it
	// leaves Live false.
	Live bool
	// MarkRun: the holder is a run (not a task instance), and the write
	// that admits it, or leaves it waiting, says so on its run item
	// (LimiterWrite.Mark), so its admission outlives its room.
	MarkRun bool
	// Share: the limiter is a group's shard, whose stored limit is its
	// share (limiter.Reshare, limiter.Borrow): the entry keeps it rather
	// than writing Limit.
	Share bool
	// AdmitOnly: the entry lands only if it admits the run (a group's
	// entry trying a shard); otherwise nothing is written and Entered is
	// the zero value.
	AdmitOnly bool
	// Group, with Share: the group's limit the entry expects its shard to
	// record (limiter.State.Group); a shard that records another (or is
	// not stored) refuses it, writing nothing (errReshare), and the group
	// is re-shared first. 0: the shard's share is taken as it is.
	Group int
}

// ErrRunEnded: a Live entry found its run ended (or gone); nothing was
// written.
var ErrRunEnded = fmt.Errorf("run ended before its entry: %w", ErrConflict)

// Entered is what became of an entry: admitted at once, or waiting (and
// why).
type Entered struct {
	Admitted   bool
	AdmittedAt time.Time
	Reason     string
	// Found: the run was in the limiter before this entry (a repeated
	// entry); nothing was written.
	Found bool
	// shards is, on an AdmitOnly entry that found no room, how many
	// shards the group has as the shard read said (0: unknown).
	shards int
}

// EnterLimiter admits a new run at once when nobody waits and there is
// room, else puts it in the queue; ErrLimitQueueFull beyond
// limiter.MaxWaiting. A run already in the limiter answers where it is.
// Entries queued for the limiter's turn in this process are written with
// the turn holder's, in one write (enterTogether).
func (t *Turns) EnterLimiter(ctx context.Context, s Limiters, e Entry, now time.Time) (Entered, error) {
	if err := CheckLimiterName(e.Limiter); err != nil {
		return Entered{}, err
	}
	w := &waiter{entry: &e, now: now}
	tu, release, err := t.takeAs(ctx, s, e.Limiter, w)
	if err != nil {
		return Entered{}, err
	}
	if w.joined {
		return w.entered, w.err
	}
	defer release()
	ws := append([]*waiter{w}, t.join(tu, true, maxJoined)...)
	enterTogether(ctx, s, tu, e.Limiter, ws)
	for _, j := range ws[1:] {
		j.done()
	}
	return w.entered, w.err
}

// maxJoined bounds the work a turn's holder writes with its own: one
// DynamoDB transaction takes at most 100 items, and an entry touches at
// most four (its admitted or waiting item, the other's absence, its run),
// a leave one and a head it admits three (its waiting and admitted items,
// its run; admitHeads takes one more than maxJoined), each write the
// limiter item besides: 24 leaves and 24 heads are 97.
const maxJoined = 23

// enterTogether enters ws's runs (the holder's first) in one write when
// it lands, else each on its own, and sets each waiter's outcome.
func enterTogether(ctx context.Context, s Limiters, tu *turn, name string, ws []*waiter) {
	if len(ws) > 1 && enterAtOnce(ctx, s, tu, name, ws) {
		return
	}
	for _, w := range ws {
		w.entered, w.err = enterHeld(ctx, s, tu, *w.entry, w.now)
	}
}

// enterAtOnce decides ws's entries in order, on the limiter as this
// process last wrote it and then on a fresh read, and writes them in one
// write. It answers false, having written nothing, when neither write
// landed or an entry is refused (the queue full; the same run twice):
// each is then entered on its own, which tells a repeated entry apart.
func enterAtOnce(ctx context.Context, s Limiters, tu *turn, name string, ws []*waiter) bool {
	runs := map[string]bool{}
	for _, w := range ws {
		if runs[w.entry.Place.RunID] {
			return false
		}
		runs[w.entry.Place.RunID] = true
	}
	var out []Entered
	var fresh bool // the round decided on a read, not on this process's last write
	err := Update(ctx, Rounds{Max: 2}, tu.reader(s, name),
		func(_ context.Context, cur seen) (LimiterWrite, Step, error) {
			fresh = !cur.cached
			st := cur.st
			writes := make([]LimiterWrite, len(ws))
			out = make([]Entered, len(ws))
			for i, w := range ws {
				var err error
				if writes[i], st, out[i], err = decideEntry(st, *w.entry, w.now); err != nil {
					return LimiterWrite{}, 0, err
				}
			}
			lw := writes[0]
			lw.Name, lw.Expected, lw.State, lw.Also = name, cur.st.Version, st, writes[1:]
			return lw, StepWrite, nil
		},
		func(ctx context.Context, lw LimiterWrite) error {
			err := tu.write(ctx, s, lw)
			if errors.Is(err, ErrVersionConflict) && fresh {
				return errRefusedAtOnce // refused on a fresh read: enter each on its own
			}
			return err
		})
	if err != nil {
		return false
	}
	for i, w := range ws {
		w.entered = out[i]
	}
	return true
}

// errRefusedAtOnce ends enterAtOnce's rounds when a write decided on a
// fresh read was refused: its entries are then entered one by one.
var errRefusedAtOnce = errors.New("entries refused at once")

// decideEntry decides e on st: the write's item changes and the state it
// leaves, and the answer; limiter.ErrQueueFull beyond the bound.
func decideEntry(st limiter.State, e Entry, now time.Time) (LimiterWrite, limiter.State, Entered, error) {
	switch {
	case !e.Share && st.GroupShards() > 1:
		return LimiterWrite{}, st, Entered{}, ErrGrouped
	case !e.Share:
		st.Limit = e.Limit
	case e.Group > 0 && (st.Version == 0 || st.Group != e.Group):
		return LimiterWrite{}, st, Entered{}, errReshare
	}
	n, admitted, why, err := st.Enter(e.Rate, now, limiter.MaxWaiting)
	if err != nil {
		return LimiterWrite{}, st, Entered{}, err
	}
	if e.AdmitOnly && !admitted {
		return LimiterWrite{}, st, Entered{}, errNoRoom
	}
	w := LimiterWrite{State: n}
	if e.Live {
		w.LiveRun = e.Place.RunID
	}
	if e.MarkRun {
		w.Mark = &RunMark{RunID: e.Place.RunID}
	}
	if admitted {
		w.PutAdmitted = &Admitted{RunID: e.Place.RunID, AdmittedAt: now}
		w.AbsentWaiting = &e.Place
		if w.Mark != nil {
			w.Mark.At = now
		}
	} else {
		w.PutWaiting = &Waiting{Place: e.Place, MarkRun: e.MarkRun}
		w.AbsentAdmitted = e.Place.RunID
	}
	return w, n, Entered{Admitted: admitted, AdmittedAt: w.admittedAt(), Reason: why}, nil
}

// ErrGrouped: a limiter's item is shard 0 of a group (a limit once above
// limiter.ShardLimit, since lowered: a group never loses shards), whose
// stored limit is its share; the caller enters or sets it as a group
// (EnterGroup, SetGroupLimit). Nothing was written.
var ErrGrouped = errors.New("limiter is a group of shards")

// errNoRoom: an AdmitOnly entry found no room (or runs waiting).
var errNoRoom = errors.New("limiter: no room to admit at once")

// errReshare: a group's shard records another limit than the entry
// expects (Entry.Group), or is not stored yet; nothing was written.
var errReshare = errors.New("limiter: group to re-share")

// enterHeld is one entry's read-decide-write loop in a turn held.
func enterHeld(ctx context.Context, s Limiters, tu *turn, e Entry, now time.Time) (Entered, error) {
	var en Entered
	err := Update(ctx, limiterRounds(), tu.reader(s, e.Limiter),
		func(_ context.Context, cur seen) (LimiterWrite, Step, error) {
			w, _, out, err := decideEntry(cur.st, e, now)
			switch {
			case errors.Is(err, errNoRoom) && cur.cached:
				return w, StepAgain, nil
			case errors.Is(err, errNoRoom):
				// Nothing written (a round before may have decided
				// otherwise); the group's size, for the entry's next look.
				en = Entered{shards: cur.st.GroupShards()}
				return w, StepDone, nil
			case err != nil && cur.cached:
				return w, StepAgain, nil // refused on what this process last wrote: read it
			case errors.Is(err, ErrGrouped), errors.Is(err, errReshare):
				return w, 0, err
			case err != nil:
				return w, 0, fmt.Errorf("enter limiter %s: %w", e.Limiter, ErrLimitQueueFull)
			}
			w.Name, w.Expected, en = e.Limiter, cur.st.Version, out
			return w, StepWrite, nil
		},
		func(ctx context.Context, w LimiterWrite) error {
			err := tu.write(ctx, s, w)
			switch {
			case errors.Is(err, ErrVersionConflict):
				// A retried entry whose first write landed is where it is.
				where, found, ferr := findRun(ctx, s, e.Limiter, e.Place)
				if ferr != nil || found {
					en = where
					return ferr
				}
			case errors.Is(err, ErrConflict):
				return fmt.Errorf("enter limiter %s: run %s: %w", e.Limiter, e.Place.RunID, ErrRunEnded)
			}
			return err
		})
	if err != nil {
		return Entered{}, unsettled(err, "enter limiter "+e.Limiter)
	}
	return en, nil
}

// seen is a limiter as a round found it; cached: this process's last
// write of it, not a read.
type seen struct {
	st     limiter.State
	cached bool
}

// reader reads limiter name for an Update's rounds: the first tries this
// process's last write (turn.state).
func (tu *turn) reader(s Limiters, name string) func(context.Context, int) (seen, error) {
	return func(ctx context.Context, round int) (seen, error) {
		st, cached, err := tu.state(ctx, s, name, round)
		return seen{st, cached}, err
	}
}

// write writes w and, when it lands, remembers the state it left.
func (tu *turn) write(ctx context.Context, s Limiters, w LimiterWrite) error {
	if err := s.WriteLimiter(ctx, w); err != nil {
		return err
	}
	tu.wrote(w.State)
	return nil
}

// limiterRounds bounds a limiter operation's rounds under contention:
// limiterRetries, the first retry at once (it reads afresh), the later
// ones after a conflictPause.
func limiterRounds() Rounds {
	return Rounds{Max: limiterRetries, Pause: func(ctx context.Context, missed int) error {
		if missed < 2 {
			return nil
		}
		return conflictPause(ctx, missed)
	}}
}

// unsettled names what an Update that ran out of rounds was about.
func unsettled(err error, what string) error {
	if errors.Is(err, ErrUnsettled) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return err
}

func (w LimiterWrite) admittedAt() time.Time {
	if w.PutAdmitted == nil {
		return time.Time{}
	}
	return w.PutAdmitted.AdmittedAt
}

// findRun reports whether a run is in the limiter already (a retried
// entry whose first write landed).
func findRun(ctx context.Context, s Limiters, name string, p limiter.Place) (Entered, bool, error) {
	e, err := FindInLimiter(ctx, s, name, p)
	e.Found = err == nil && (e.Admitted || e.Reason != "")
	return e, e.Found, err
}

// FindInLimiter reports where a run stands in a limiter, by its place:
// admitted, waiting (Reason set: concurrency, or rate_limit when the
// limiter has room for it but its window is full), or neither (the zero
// Entered). A caller that may be repeating an entry (the ticker's repair)
// looks first: a run enters a limiter once.
func FindInLimiter(ctx context.Context, s Limiters, name string, p limiter.Place) (Entered, error) {
	a, w, err := s.FindRun(ctx, name, p)
	if err != nil || (a == nil && w == nil) {
		return Entered{}, err
	}
	if a != nil {
		return Entered{Admitted: true, AdmittedAt: a.AdmittedAt}, nil
	}
	st, err := s.GetLimiter(ctx, name)
	if err != nil {
		return Entered{}, err
	}
	why := limiter.ReasonConcurrency
	if st.Limit == 0 || st.Active < st.Limit {
		why = limiter.ReasonRateLimit
	}
	return Entered{Reason: why}, nil
}

// AdmitNext admits waiting runs in order while the limiter has room (the
// paused passed over), each by a write conditioned on the limiter's
// version as read with the queue's head, and answers them. It is the
// hand-off every write that makes room calls; the ticker calls it to
// repair a hand-off lost in a crash. It stops at the first look that finds
// no room or nobody waiting.
func (t *Turns) AdmitNext(ctx context.Context, s Limiters, name string, rate limiter.Rate, now time.Time) ([]Admitted, error) {
	tu, release, err := t.take(ctx, s, name, true)
	if err != nil {
		return nil, err
	}
	defer release()
	return admitNextHeld(ctx, s, name, rate, now, tu, false)
}

// LeaveAndAdmitNext is LeaveLimiter and, when the run left, AdmitNext, in
// one turn: the hand-off's first look is the state the leave wrote, which
// no read would tell better (any write after it saw the room it made), so
// a limiter nobody waits in costs its hand-off no read. Leaves queued for
// the turn in this process are written with the holder's, in one write;
// the holder hands on the room they all made, and answers the runs that
// admitted (the others answer none).
func (t *Turns) LeaveAndAdmitNext(ctx context.Context, s Limiters, name, runID string, rate limiter.Rate, now time.Time) (bool, []Admitted, error) {
	l, err := t.leaveAndAdmit(ctx, s, name, runID, rate, now)
	return l.Left, l.Admitted, err
}

// Left is what a leave and its hand-off did (LeaveAndHandOn).
type Left struct {
	Left     bool
	Admitted []Admitted
	// Lends: the write this caller made turned the limiter from one with
	// no idle room (full, or runs waiting it could admit) into one with
	// idle room (room and no unpaused run waiting), as this process's own
	// writes in the turn left it. A group's shard that now lends may give
	// a unit of share to a shard that is short: the only leave after which
	// the group's other shards are worth a read (docs/store.md, "A group
	// with a large limit"). Only the turn's holder says so.
	Lends bool
}

// LeaveAndHandOn is LeaveAndAdmitNext answering whether the limiter now
// has idle room it had not before (Left.Lends).
func (t *Turns) LeaveAndHandOn(ctx context.Context, s Limiters, name, runID string, rate limiter.Rate, now time.Time) (Left, error) {
	return t.leaveAndAdmit(ctx, s, name, runID, rate, now)
}

// leaveAndAdmit is LeaveAndAdmitNext's turn.
func (t *Turns) leaveAndAdmit(ctx context.Context, s Limiters, name, runID string, rate limiter.Rate, now time.Time) (Left, error) {
	w := &waiter{urgent: true, leave: runID}
	tu, release, err := t.takeAs(ctx, s, name, w)
	if err != nil {
		return Left{}, err
	}
	if w.joined {
		return Left{Left: w.left}, w.err
	}
	defer release()
	ws := append([]*waiter{w}, t.join(tu, false, maxJoined)...)
	got := leaveTogether(ctx, s, tu, name, ws, rate, now)
	left := 0
	for _, j := range ws {
		if j.left {
			left++
		}
	}
	for _, j := range ws[1:] {
		j.done()
	}
	if left == 0 {
		return Left{}, w.err
	}
	more, err := admitNextHeld(ctx, s, name, rate, now, tu, true)
	got = append(got, more...)
	out := Left{Left: w.left, Admitted: got}
	if err == nil && tu.known {
		// The state the turn's last write left, after which the hand-off
		// found nothing more to admit: room there is idle. Before the
		// leaves it held left-admitted runs more (no other write in
		// between, or a conflict would have read it again).
		after := tu.last
		out.Lends = after.Active < after.Limit && (after.Active+left-len(got) >= after.Limit || len(got) > 0)
	}
	return out, cmp.Or(w.err, err)
}

// leaveTogether gives back ws's runs' room (the holder's first) in one
// write when it lands, else each on its own, and sets each waiter's
// outcome.
func leaveTogether(ctx context.Context, s Limiters, tu *turn, name string, ws []*waiter, rate limiter.Rate, now time.Time) []Admitted {
	if got, ok := leaveAtOnce(ctx, s, tu, name, ws, rate, now); ok {
		return got
	}
	for _, w := range ws {
		w.left, w.err = changeLimiterHeld(ctx, s, name, tu, leaveDecision(s, name, w.leave))
	}
	return nil
}

// leaveAtOnce writes ws's leaves in one write, guessing each run active
// (the run that ends almost always is) on the limiter as this process
// last wrote it, with the admission of the queue's head the room they make
// (admitHeads, one Query), and answers the runs it admitted. It answers
// false, having written nothing, when there is no such state, it holds
// fewer active runs, a run is there twice, or the write is refused (a run
// not active: the delete's condition): each then leaves on its own.
func leaveAtOnce(ctx context.Context, s Limiters, tu *turn, name string, ws []*waiter, rate limiter.Rate, now time.Time) ([]Admitted, bool) {
	st, cached, err := tu.state(ctx, s, name, 0)
	if err != nil || !cached || st.Active < len(ws) {
		return nil, false
	}
	runs := map[string]bool{}
	cur := st
	var writes []LimiterWrite
	for _, w := range ws {
		if runs[w.leave] {
			return nil, false
		}
		runs[w.leave] = true
		cur = cur.Release()
		writes = append(writes, LimiterWrite{DeleteAdmitted: w.leave})
	}
	heads, got, cur, err := admitHeads(ctx, s, name, cur, rate, now)
	if err != nil {
		return nil, false
	}
	writes = append(writes, heads...)
	lw := writes[0]
	lw.Name, lw.Expected, lw.State, lw.Also = name, st.Version, cur, writes[1:]
	if err := s.WriteLimiter(ctx, lw); err != nil {
		return nil, false
	}
	tu.wrote(cur)
	for _, w := range ws {
		w.left = true
	}
	return got, true
}

// admitNextHeld is AdmitNext's loop in a turn held. The first round may
// try on this process's last write; a "no room" or "nobody waiting" is
// only believed from a fresh read, or, with ownWrite, from the write the
// caller made in this turn (each admission it writes is one too: the
// round after it decides on it, with no read).
func admitNextHeld(ctx context.Context, s Limiters, name string, rate limiter.Rate, now time.Time, tu *turn, ownWrite bool) ([]Admitted, error) {
	var out, got []Admitted
	try := 0 // tu.state's round: 0 tries this process's last write
	err := Update(ctx, Rounds{Max: limiterRetries, Pause: conflictPause},
		func(ctx context.Context, _ int) (seen, error) { return tu.reader(s, name)(ctx, try) },
		func(ctx context.Context, cur seen) (LimiterWrite, Step, error) {
			var writes []LimiterWrite
			n := cur.st
			if ok, _ := cur.st.Room(rate, now); ok && cur.st.Waiting > 0 {
				var err error
				if writes, got, n, err = admitHeads(ctx, s, name, cur.st, rate, now); err != nil {
					return LimiterWrite{}, 0, err
				}
			}
			if len(writes) == 0 && cur.cached && !ownWrite {
				try = 1 // a guess: read
				return LimiterWrite{}, StepAgain, nil
			}
			if len(writes) == 0 {
				return LimiterWrite{}, StepDone, nil
			}
			w := writes[0]
			w.Name, w.Expected, w.State, w.Also = name, cur.st.Version, n, writes[1:]
			return w, StepWriteMore, nil
		},
		func(ctx context.Context, w LimiterWrite) error {
			if err := tu.write(ctx, s, w); err != nil {
				try, ownWrite = 1, false
				return err
			}
			// The next round decides on this write: it is the caller's
			// own, in the turn it holds.
			out = append(out, got...)
			try, ownWrite = 0, true
			return nil
		})
	return out, unsettled(err, "admit next of limiter "+name)
}

// admitHeads decides, on st, the admission of as many of the queue's
// head as the limiter has room for (a write's worth at most, the paused
// passed over): each one's item changes, the runs, and the state they
// leave. Nothing when there is no room or nobody unpaused waits.
func admitHeads(ctx context.Context, s Limiters, name string, st limiter.State, rate limiter.Rate, now time.Time) ([]LimiterWrite, []Admitted, limiter.State, error) {
	room := 0
	for n := st; room <= maxJoined; room++ {
		var ok bool
		if n, ok = n.AdmitWaiting(rate, now); !ok {
			break
		}
	}
	if room == 0 {
		return nil, nil, st, nil
	}
	heads, err := firstUnpaused(ctx, s, name, st.Waiting, room)
	if err != nil {
		return nil, nil, st, err
	}
	n := st
	var writes []LimiterWrite
	var got []Admitted
	for _, h := range heads {
		next, ok := n.AdmitWaiting(rate, now)
		if !ok {
			break
		}
		n = next
		a := Admitted{RunID: h.RunID, AdmittedAt: now}
		lw := LimiterWrite{DeleteWaiting: &h.Place, PutAdmitted: &a}
		if h.MarkRun {
			lw.Mark = &RunMark{RunID: h.RunID, At: now}
		}
		writes = append(writes, lw)
		got = append(got, a)
	}
	return writes, got, n, nil
}

// firstUnpaused reads the queue's first want runs that are not paused, a
// few items first and more only when those are too many paused: an
// admission reads the head, not the queue.
func firstUnpaused(ctx context.Context, s Limiters, name string, waiting, want int) ([]Waiting, error) {
	for k := max(8, want); ; k *= 8 {
		ws, err := s.ListWaiting(ctx, name, min(k, waiting))
		if err != nil {
			return nil, err
		}
		var out []Waiting
		for _, w := range ws {
			if !w.Paused && len(out) < want {
				out = append(out, w)
			}
		}
		if len(out) == want || len(ws) < min(k, waiting) || k >= waiting {
			return out, nil
		}
	}
}

// LeaveLimiter gives back an ended run's room: its admitted item deleted
// and the count lowered in one write. It reports false when the run held
// nothing (left already): it is safe to repeat. The caller then calls
// AdmitNext.
func (t *Turns) LeaveLimiter(ctx context.Context, s Limiters, name, runID string) (bool, error) {
	return t.changeLimiter(ctx, s, name, true, leaveDecision(s, name, runID))
}

// leaveDecision decides a leave: the admitted item deleted and the count
// lowered, or nothing when the run holds nothing.
func leaveDecision(s Limiters, name, runID string) decision {
	decide := func(st limiter.State, a *Admitted, _ *Waiting) (LimiterWrite, bool) {
		if a == nil {
			return LimiterWrite{}, false
		}
		return LimiterWrite{State: st.Release(), DeleteAdmitted: runID}, true
	}
	return func(ctx context.Context, st limiter.State, cached bool) (LimiterWrite, bool, error) {
		if cached && st.Active > 0 {
			// The run that ends is almost always admitted: its write is
			// tried without reading its item first (the delete's
			// condition says whether it is there; a fresh round reads).
			lw, ok := decide(st, &Admitted{RunID: runID}, nil)
			return lw, ok, nil
		}
		a, w, err := s.FindRun(ctx, name, limiter.Place{RunID: runID})
		if err != nil {
			return LimiterWrite{}, false, err
		}
		lw, ok := decide(st, a, w)
		return lw, ok, nil
	}
}

// WithdrawWaiting takes a waiting run out of the queue (cancelled before
// admission); false when it was not waiting.
func (t *Turns) WithdrawWaiting(ctx context.Context, s Limiters, name string, p limiter.Place) (bool, error) {
	return t.changeRun(ctx, s, name, p, true, func(st limiter.State, _ *Admitted, w *Waiting) (LimiterWrite, bool) {
		if w == nil {
			return LimiterWrite{}, false
		}
		return LimiterWrite{State: st.Withdraw(), DeleteWaiting: &w.Place}, true
	})
}

// PauseWaiting marks a waiting run paused (passed over, keeping its
// place) or resumed; false when it was not waiting.
func (t *Turns) PauseWaiting(ctx context.Context, s Limiters, name string, p limiter.Place, paused bool) (bool, error) {
	return t.changeRun(ctx, s, name, p, false, func(st limiter.State, _ *Admitted, w *Waiting) (LimiterWrite, bool) {
		if w == nil || w.Paused == paused {
			return LimiterWrite{}, false
		}
		n := *w
		n.Paused = paused
		return LimiterWrite{State: st.Touch(), PutWaiting: &n, Replace: true}, true
	})
}

// changeRun is changeLimiter for a write about one run, which reads only
// that run's items.
func (t *Turns) changeRun(ctx context.Context, s Limiters, name string, p limiter.Place, urgent bool, decide func(limiter.State, *Admitted, *Waiting) (LimiterWrite, bool)) (bool, error) {
	return t.changeLimiter(ctx, s, name, urgent, func(ctx context.Context, st limiter.State, _ bool) (LimiterWrite, bool, error) {
		a, w, err := s.FindRun(ctx, name, p)
		if err != nil {
			return LimiterWrite{}, false, err
		}
		lw, ok := decide(st, a, w)
		return lw, ok, nil
	})
}

// SetLimiterLimit stores a limiter's new limit (a job update); the caller
// then calls AdmitNext. Lowering it stops nothing already active.
func (t *Turns) SetLimiterLimit(ctx context.Context, s Limiters, name string, limit int) (bool, error) {
	return t.changeLimiter(ctx, s, name, true, func(_ context.Context, st limiter.State, _ bool) (LimiterWrite, bool, error) {
		if st.GroupShards() > 1 {
			return LimiterWrite{}, false, ErrGrouped
		}
		if st.Version == 0 || st.Limit == limit {
			return LimiterWrite{}, false, nil
		}
		return LimiterWrite{State: st.SetLimit(limit)}, true, nil
	})
}

// changeLimiter runs one read-decide-write round until its write lands or
// decide says there is nothing to do; urgent: it makes room (takes its
// turn before entries). decide is told when its state is
// this process's last write rather than a read (the turn's first round):
// it may guess on it, since a wrong guess only fails the write's
// conditions and the next round reads.
func (t *Turns) changeLimiter(ctx context.Context, s Limiters, name string, urgent bool, decide decision) (bool, error) {
	tu, release, err := t.take(ctx, s, name, urgent)
	if err != nil {
		return false, err
	}
	defer release()
	return changeLimiterHeld(ctx, s, name, tu, decide)
}

// decision decides one round of a limiter change; cached: st is this
// process's last write, not a read.
type decision func(ctx context.Context, st limiter.State, cached bool) (LimiterWrite, bool, error)

// changeLimiterHeld is changeLimiter's loop in a turn held.
func changeLimiterHeld(ctx context.Context, s Limiters, name string, tu *turn, decide decision) (bool, error) {
	wrote := false
	err := Update(ctx, limiterRounds(), tu.reader(s, name),
		func(ctx context.Context, cur seen) (LimiterWrite, Step, error) {
			w, ok, err := decide(ctx, cur.st, cur.cached)
			switch {
			case err != nil:
				return w, 0, err
			case !ok && cur.cached:
				return w, StepAgain, nil // nothing to do is believed from a fresh read only
			case !ok:
				return w, StepDone, nil
			}
			w.Name, w.Expected = name, cur.st.Version
			return w, StepWrite, nil
		},
		func(ctx context.Context, w LimiterWrite) error {
			err := tu.write(ctx, s, w)
			wrote = err == nil
			return err
		})
	if err != nil {
		return false, unsettled(err, "limiter "+name)
	}
	return wrote, nil
}
