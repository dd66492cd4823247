package ledgertest

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel/limiter"
)

var limiterGroupCases = []Case{
	{"limiter group splits a large limit into shards whose shares sum to it", testGroupShares},
	{"limiter group borrows a shard's idle room for another's queue", testGroupBorrow},
	{"limiter group share write refuses a stale version and writes nothing", testGroupShareConditions},
	{"limiter group admissions stay exact under racing entries, leaves and borrows", testGroupRace},
	{"limiter group lowered to one item's limit refuses a one-item entry or limit", testGroupRefusesOneItemWrites},
	{"limiter group entry reads its home shard only while it has room", testGroupEntryReadsItsShard},
}

// groupExact checks every shard's counters against its items and answers
// the group's counts summed.
func groupExact(t *testing.T, h *Harness, name string) (limit, active, waiting int) {
	t.Helper()
	group, err := ledger.Group(context.Background(), h.Store, name)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range group {
		exact(t, h, limiter.ShardName(name, sh))
	}
	return ledger.GroupCounts(group)
}

func testGroupShares(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "big/"
	// A limiter stored as one item (no shard count) reads as a group of
	// one, as every limiter did before groups.
	enter(t, h, name, 2, place(0, 3))
	if group, err := ledger.Group(ctx, h.Store, name); err != nil || len(group) != 1 || group[0].Limit != 2 {
		t.Fatalf("a one-item limiter as a group: %+v, %v", group, err)
	}
	n, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 2500)
	if err != nil || n != 3 {
		t.Fatalf("set limit 2500: %d shards, %v", n, err)
	}
	group, err := ledger.Group(ctx, h.Store, name)
	if err != nil || len(group) != 3 {
		t.Fatalf("group %+v, %v", group, err)
	}
	for sh, st := range group {
		if st.Shards != 3 {
			t.Fatalf("shard %d records %d shards", sh, st.Shards)
		}
	}
	if limit, active, _ := groupExact(t, h, name); limit != 2500 || active != 1 {
		t.Fatalf("group limit %d active %d; want 2500 and 1", limit, active)
	}
	// Lowered below what it holds, the group keeps its shards and gives
	// no shard room: the shard holding the run keeps its share.
	if n, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 1); err != nil || n != 3 {
		t.Fatalf("set limit 1: %d shards, %v", n, err)
	}
	group, _ = ledger.Group(ctx, h.Store, name)
	if group[0].Limit != 1 || group[1].Limit != 0 || group[2].Limit != 0 {
		t.Fatalf("lowered shares %d %d %d; want 1 0 0", group[0].Limit, group[1].Limit, group[2].Limit)
	}
	e, err := h.Turns.EnterGroup(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 1, Place: place(1, 3)}, h.Clock.Now())
	if err != nil || e.Admitted || e.Found {
		t.Fatalf("an entry into a full group: %+v, %v", e, err)
	}
	if _, active, waiting := groupExact(t, h, name); active != 1 || waiting != 1 {
		t.Fatalf("group active %d waiting %d; want 1 and 1", active, waiting)
	}
}

func testGroupBorrow(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "lend/"
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 1001); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 2); err != nil { // two shards of one each
		t.Fatal(err)
	}
	// Two runs fill both shards; the third waits in its home shard.
	shardOf := map[string]string{}
	for i := range 3 {
		e, err := h.Turns.EnterGroup(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 2, Place: place(i, 3)}, h.Clock.Now())
		if err != nil || e.Admitted != (i < 2) {
			t.Fatalf("entry %d: %+v, %v", i, e, err)
		}
		shardOf[place(i, 3).RunID] = e.Shard
	}
	waiter := shardOf["run-002"]
	// The run in the other shard ends: its shard's room is idle, and the
	// borrow moves it to the waiter's shard, which admits it.
	leaver := "run-000"
	if shardOf[leaver] == waiter {
		leaver = "run-001"
	}
	// Its shard was full: the leave says its room is now idle, the one
	// leave after which a borrow is worth a read.
	if l, err := h.Turns.LeaveAndHandOn(ctx, h.Store, shardOf[leaver], leaver, limiter.Rate{}, h.Clock.Now()); err != nil || !l.Left || len(l.Admitted) != 0 || !l.Lends {
		t.Fatalf("leave %s: %+v %v; want left, lending its idle room", leaver, l, err)
	}
	got, err := h.Turns.Rebalance(ctx, h.Store, name, h.Clock.Now())
	if err != nil || len(got[waiter]) != 1 || got[waiter][0].RunID != "run-002" {
		t.Fatalf("rebalance admitted %+v, %v; want run-002 in %s", got, err, waiter)
	}
	if limit, active, waiting := groupExact(t, h, name); limit != 2 || active != 2 || waiting != 0 {
		t.Fatalf("group limit %d active %d waiting %d; want 2 2 0", limit, active, waiting)
	}
	// Nothing left to move: a second pass writes nothing.
	before, _ := ledger.Group(ctx, h.Store, name)
	if got, err := h.Turns.Rebalance(ctx, h.Store, name, h.Clock.Now()); err != nil || len(got) != 0 {
		t.Fatalf("a balanced group rebalanced: %+v, %v", got, err)
	}
	after, _ := ledger.Group(ctx, h.Store, name)
	for sh := range before {
		if before[sh].Version != after[sh].Version {
			t.Fatalf("shard %d written by a pass with nothing to move", sh)
		}
	}
	// The waiter's shard now holds both units and both runs: the first
	// to leave turns its room idle; the second leaves a shard whose room
	// was idle already, which lends nothing new.
	stayer := "run-001"
	if leaver == stayer {
		stayer = "run-000"
	}
	for i, id := range []string{"run-002", stayer} {
		l, err := h.Turns.LeaveAndHandOn(ctx, h.Store, waiter, id, limiter.Rate{}, h.Clock.Now())
		if err != nil || !l.Left || l.Lends != (i == 0) {
			t.Fatalf("leave %s from %s: %+v, %v; want left, lending %v", id, waiter, l, err, i == 0)
		}
	}
}

func testGroupShareConditions(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "shares/"
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 2000); err != nil {
		t.Fatal(err)
	}
	group, _ := ledger.Group(ctx, h.Store, name)
	f, to := limiter.Borrow(group[0], group[1])
	stale := []ledger.ShareWrite{
		{Name: limiter.ShardName(name, 0), Expected: group[0].Version, State: f},
		{Name: limiter.ShardName(name, 1), Expected: group[1].Version - 1, State: to},
	}
	if err := h.Store.WriteShares(ctx, stale); !errors.Is(err, ledger.ErrVersionConflict) {
		t.Fatalf("one stale version: %v", err)
	}
	twice := []ledger.ShareWrite{stale[0], stale[0]}
	if err := h.Store.WriteShares(ctx, twice); !errors.Is(err, ledger.ErrInvalidInput) {
		t.Fatalf("one shard twice: %v", err)
	}
	after, _ := ledger.Group(ctx, h.Store, name)
	for sh := range group {
		if after[sh].Version != group[sh].Version || after[sh].Limit != 1000 {
			t.Fatalf("a refused share write changed shard %d: %+v", sh, after[sh])
		}
	}
	stale[1].Expected = group[1].Version
	if err := h.Store.WriteShares(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if limit, _, _ := groupExact(t, h, name); limit != 2000 {
		t.Fatalf("a borrow changed the group's limit to %d", limit)
	}
}

func testGroupRace(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name, limit, runs = "grace/", 3, 24
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 2001); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, limit); err != nil { // three shards of one each
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs*4)
	for i := range runs {
		wg.Go(func() {
			turns := ledger.NewTurns() // racing as processes do: no turns
			if _, err := turns.EnterGroup(ctx, h.Store, ledger.Entry{Limiter: name, Limit: limit, Place: place(i, 1+i%5)}, h.Clock.Now()); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	if l, active, waiting := groupExact(t, h, name); l != limit || active != limit || waiting != runs-limit {
		t.Fatalf("after racing entries: limit %d active %d waiting %d", l, active, waiting)
	}
	// Every active run ends; each ending hands on in its shard and then
	// rebalances the group, racing the others, until every run went
	// through. At no quiet moment are more than limit runs admitted.
	done := map[string]bool{}
	var mu sync.Mutex
	for round := 0; len(done) < runs; round++ {
		if round > runs {
			t.Fatalf("runs never all admitted: %d of %d", len(done), runs)
		}
		held := 0
		for sh := range limiter.Shards(2001) {
			shard := limiter.ShardName(name, sh)
			adm, err := h.Store.ListAdmitted(ctx, shard)
			if err != nil {
				t.Fatal(err)
			}
			held += len(adm)
			for _, a := range adm {
				wg.Go(func() {
					turns := ledger.NewTurns()
					if _, _, err := turns.LeaveAndAdmitNext(ctx, h.Store, shard, a.RunID, limiter.Rate{}, h.Clock.Now()); err != nil {
						errs <- err
					}
					mu.Lock()
					done[a.RunID] = true
					mu.Unlock()
					if _, err := turns.Rebalance(ctx, h.Store, name, h.Clock.Now()); err != nil {
						errs <- err
					}
				})
			}
		}
		if held > limit {
			t.Fatalf("%d runs admitted in the group, limit %d", held, limit)
		}
		wg.Wait()
		if l, _, _ := groupExact(t, h, name); l != limit {
			t.Fatalf("shares sum to %d, limit %d", l, limit)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, active, waiting := groupExact(t, h, name); active != 0 || waiting != 0 {
		t.Fatalf("at the end: active %d waiting %d", active, waiting)
	}
}

// A group whose limit was lowered to one item's keeps its shards; an
// entry or a limit written as one limiter's (whose limit would replace
// shard 0's share) is refused with ErrGrouped and writes nothing: the
// scheduler then enters or sets it as a group.
func testGroupRefusesOneItemWrites(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name = "lowered/"
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 2000); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Turns.SetGroupLimit(ctx, h.Store, name, 10); err != nil {
		t.Fatal(err)
	}
	before, err := ledger.Group(ctx, h.Store, name)
	if err != nil || len(before) != 2 {
		t.Fatalf("lowered group %+v, %v; want two shards", before, err)
	}
	if _, err := h.Turns.EnterLimiter(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 10, Place: place(0, 1)}, h.Clock.Now()); !errors.Is(err, ledger.ErrGrouped) {
		t.Fatalf("one-item entry into a group: %v; want ErrGrouped", err)
	}
	if _, err := h.Turns.SetLimiterLimit(ctx, h.Store, name, 10); !errors.Is(err, ledger.ErrGrouped) {
		t.Fatalf("one-item limit of a group: %v; want ErrGrouped", err)
	}
	after, err := ledger.Group(ctx, h.Store, name)
	if err != nil {
		t.Fatal(err)
	}
	for sh := range before {
		if after[sh].Version != before[sh].Version || after[sh].Limit != before[sh].Limit {
			t.Fatalf("shard %d written: %+v, was %+v", sh, after[sh], before[sh])
		}
	}
	if _, active, waiting := groupExact(t, h, name); active != 0 || waiting != 0 {
		t.Fatalf("group active %d waiting %d; want none", active, waiting)
	}
	e, err := h.Turns.EnterGroup(ctx, h.Store, ledger.Entry{Limiter: name, Limit: 10, Place: place(0, 1)}, h.Clock.Now())
	if err != nil || !e.Admitted {
		t.Fatalf("entry as a group: %+v, %v", e, err)
	}
}

// limiterReads counts a store's reads of limiter items.
type limiterReads struct {
	ledger.Store
	mu            sync.Mutex
	gets, batches int
}

func (r *limiterReads) GetLimiter(ctx context.Context, name string) (limiter.State, error) {
	r.mu.Lock()
	r.gets++
	r.mu.Unlock()
	return r.Store.GetLimiter(ctx, name)
}

func (r *limiterReads) GetLimiters(ctx context.Context, names []string) ([]limiter.State, error) {
	r.mu.Lock()
	r.batches++
	r.mu.Unlock()
	return r.Store.GetLimiters(ctx, names)
}

// counts answers the reads since the last call.
func (r *limiterReads) counts() (gets, batches int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gets, batches, r.gets, r.batches = r.gets, r.batches, 0, 0
	return gets, batches
}

// placeHomed is the first test place from i whose holder's home shard in
// a group of n is one of homes.
func placeHomed(t *testing.T, i, n int, homes ...int) limiter.Place {
	t.Helper()
	for ; i < 1000; i++ {
		p := place(i, 3)
		for _, h := range homes {
			if limiter.Home(p.RunID, n) == h {
				return p
			}
		}
	}
	t.Fatalf("no place homed in %v of %d", homes, n)
	return limiter.Place{}
}

func testGroupEntryReadsItsShard(t *testing.T, h *Harness) {
	ctx := context.Background()
	const name, limit = "home/", 3000
	// Shards stored before a shard recorded its group's limit: the first
	// entry re-shares them once, which records it on every shard.
	var ws []ledger.ShareWrite
	for sh, st := range limiter.Reshare(make([]limiter.State, 3), limit) {
		st.Group = 0
		ws = append(ws, ledger.ShareWrite{Name: limiter.ShardName(name, sh), State: st})
	}
	if err := h.Store.WriteShares(ctx, ws); err != nil {
		t.Fatal(err)
	}
	entry := func(turns *ledger.Turns, s ledger.Limiters, group string, l int, p limiter.Place) ledger.GroupEntered {
		t.Helper()
		e, err := turns.EnterGroup(ctx, s, ledger.Entry{Limiter: group, Limit: l, Place: p}, h.Clock.Now())
		if err != nil || !e.Admitted {
			t.Fatalf("entry of %s in %s: %+v, %v", p.RunID, group, e, err)
		}
		return e
	}
	entry(h.Turns, h.Store, name, limit, place(0, 3))
	group, err := ledger.Group(ctx, h.Store, name)
	if err != nil {
		t.Fatal(err)
	}
	for sh, st := range group {
		if st.Group != limit {
			t.Fatalf("shard %d records the group's limit as %d after the first entry", sh, st.Group)
		}
	}

	// Another process (nothing remembered) reads its run's home shard
	// alone and is admitted there.
	r := &limiterReads{Store: h.Store}
	other := ledger.NewTurns()
	p := place(1, 3)
	e := entry(other, r, name, limit, p)
	home := limiter.ShardName(name, limiter.Home(p.RunID, 3))
	if gets, batches := r.counts(); e.Shard != home || gets != 1 || batches != 0 {
		t.Fatalf("entry admitted in %s after %d reads and %d batch reads; want %s after 1 and 0", e.Shard, gets, batches, home)
	}
	// A run of the same home in the same process: its turn wrote the
	// shard last, so the entry writes with no read.
	p = placeHomed(t, 2, 3, limiter.Home(p.RunID, 3))
	if e := entry(other, r, name, limit, p); e.Shard != home {
		t.Fatalf("second entry admitted in %s, want %s", e.Shard, home)
	}
	if gets, batches := r.counts(); gets != 0 || batches != 0 {
		t.Fatalf("second entry of one home read %d shards and %d batches; want none", gets, batches)
	}

	// Home full: the other shards are read in one read, and the run is
	// admitted by one with room.
	const full = "full/"
	shares := []int{0, 0, limit}
	ws = nil
	for sh, share := range shares {
		ws = append(ws, ledger.ShareWrite{Name: limiter.ShardName(full, sh),
			State: limiter.State{Limit: share, Shards: len(shares), Group: limit, Version: 1}})
	}
	if err := h.Store.WriteShares(ctx, ws); err != nil {
		t.Fatal(err)
	}
	p = placeHomed(t, 0, 3, 0, 1)
	e = entry(ledger.NewTurns(), r, full, limit, p)
	if gets, batches := r.counts(); e.Shard != limiter.ShardName(full, 2) || gets != 2 || batches != 1 {
		t.Fatalf("entry with its home full admitted in %s after %d reads and %d batch reads; want %s after 2 and 1",
			e.Shard, gets, batches, limiter.ShardName(full, 2))
	}
	if l, active, _ := groupExact(t, h, full); l != limit || active != 1 {
		t.Fatalf("group %s: limit %d, %d active; want %d and 1", full, l, active, limit)
	}
}
