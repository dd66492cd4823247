package limiter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The group model check explores every interleaving of a sharded group's
// store protocol (docs/store.md, "A group with a large limit"): gShards
// shard limiters whose shares sum to the group's limit, with its writes
// as atomic steps:
//
//   - create(r) starts r's entry; try(r) is its next step: a shard in
//     Order from r's home admits r when nobody waits there and it has
//     room (one conditional write), else the entry moves on; after the
//     last shard r enters its home shard (admitted if room came, else it
//     waits there and a borrow starts);
//   - start, end and release as in the one-item check; a release starts
//     its shard's admit-next pass;
//   - a pass (per shard) reads its shard and queue head, then writes the
//     admission on condition that the shard's version is unchanged; a
//     pass that admits nobody starts a borrow;
//   - a borrow reads the shards, picks one that can lend (room, no
//     unpaused run waiting) and one that is short (an unpaused run
//     waiting, no room), then moves one unit of share in one write
//     conditioned on both versions, and starts the short shard's pass;
//   - cancel and pause of a waiting run (resume is the one-item check's); the group's limit raised
//     and lowered (one write re-sharing every shard);
//   - a crash drops any handler step still to run (an entry's next try, a
//     start, a release, a pass, a borrow);
//   - tick is the ticker's repair: it releases ended runs that still hold
//     room, starts admitted runs, resumes lost entries, and runs every
//     shard's pass and a borrow.
//
// Invariants, on every edge:
//  1. an admission happens only with room: fewer than the group's limit
//     held in the group and fewer than its share in the shard;
//  2. the counters are exact: each shard's Active and Waiting are its
//     admitted and waiting items, and the shares sum to the group's limit;
//  3. a run admitted from a shard's queue has no unpaused waiting run of
//     that shard before it;
//  4. a cancelled or refused run is never admitted;
//
// and from every reachable state, once every pending step has run and the
// ticker has run once:
//  5. no unpaused run waits while the group holds fewer than its limit,
//     every ended run has handed its room back, every admitted run is
//     started.

const (
	gShards = 2
	gRuns   = 3
)

// gHome are the runs' home shards: two share shard 0.
var gHome = [gRuns]int{0, 1, 0}

const pEntering phase = 100

// gop is a pending handler step: a shard's admit-next pass or a borrow.
// Each has one slot: starting one that is pending makes it read again
// (what it read is older than the write that started it).
type gop struct {
	On       bool
	Read     bool
	V        [gShards]int64 // versions as read
	Head     int            // a pass's head as read (-1: none)
	From, To int            // a borrow's shards as read
}

type gworld struct {
	Sh          [gShards]State
	Limit       int // the group's limit
	Phase       [gRuns]phase
	Paused      [gRuns]bool
	In          [gRuns]int // the shard holding r's waiting or admitted item
	Waiting     [gRuns]bool
	Admitted    [gRuns]bool
	Try         [gRuns]int // an entry's next shard in Order (-1: none running)
	NeedStart   [gRuns]bool
	NeedRelease [gRuns]bool
	Pass        [gShards]gop
	Borrow      gop
	Used        uint64
	noBorrow    bool // the broken variant's, carried for spawnBorrow
}

type gconfig struct {
	Limit int
	// broken variants, each a defect the check must catch
	NoBorrow     bool // shards never borrow: the group is its shards side by side
	NaiveReshare bool // a new limit is split evenly, whatever each shard holds
	StopOn       string
}

func newGWorld(c gconfig) gworld {
	w := gworld{Limit: c.Limit, noBorrow: c.NoBorrow}
	for s, st := range Reshare(make([]State, gShards), c.Limit) {
		st.Version = 1
		w.Sh[s] = st
	}
	for i := range w.Try {
		w.Try[i] = -1
	}
	return w
}

func (w gworld) clone() gworld {
	for s := range w.Sh {
		w.Sh[s] = w.Sh[s].clone()
	}
	return w
}

// key identifies a world up to its versions: only whether an op's read is
// still current matters. It is bytes, not fmt: the check visits every
// state.
func (w gworld) key() string {
	b := make([]byte, 0, 64)
	flag := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	op := func(o gop) {
		flag(o.On)
		flag(o.Read)
		b = append(b, byte(o.Head+1), byte(o.From+1), byte(o.To+1))
		for s := range o.V {
			flag(o.Read && o.V[s] == w.Sh[s].Version)
		}
	}
	for _, st := range w.Sh {
		b = append(b, byte(st.Limit), byte(st.Active), byte(st.Waiting), byte(st.Shards))
	}
	b = append(b, byte(w.Limit))
	for i := range gRuns {
		b = append(b, byte(w.Phase[i]), byte(w.In[i]), byte(w.Try[i]+1))
		flag(w.Paused[i])
		flag(w.Waiting[i])
		flag(w.Admitted[i])
		flag(w.NeedStart[i])
		flag(w.NeedRelease[i])
	}
	for _, o := range w.Pass {
		op(o)
	}
	op(w.Borrow)
	b = append(b, byte(w.Used))
	return string(b)
}

// head is shard s's first unpaused waiting run (-1: none).
func (w *gworld) head(s int) int {
	h := -1
	for i := range gRuns {
		if w.Waiting[i] && w.In[i] == s && !w.Paused[i] && (h < 0 || places[i].Before(places[h])) {
			h = i
		}
	}
	return h
}

// spawnPass starts shard s's pass, or makes a pending one read again.
func (w *gworld) spawnPass(s int) { w.Pass[s] = gop{On: true} }

// spawnBorrow starts a borrow, or makes a pending one read again.
func (w *gworld) spawnBorrow() {
	if !w.noBorrow {
		w.Borrow = gop{On: true}
	}
}

func (w *gworld) held() int {
	n := 0
	for i := range gRuns {
		if w.Admitted[i] {
			n++
		}
	}
	return n
}

type gbad = func(inv int, f string, a ...any)

func (w *gworld) admit(i, s int, fromQueue bool, bad gbad) {
	if w.held() >= w.Limit {
		bad(1, "run %d admitted with %d of %d held in the group", i, w.held(), w.Limit)
	}
	inShard := 0
	for j := range gRuns {
		if w.Admitted[j] && w.In[j] == s {
			inShard++
		}
	}
	if inShard >= w.Sh[s].Limit {
		bad(1, "run %d admitted in shard %d with %d of its share %d held", i, s, inShard, w.Sh[s].Limit)
	}
	if w.Phase[i] == pCancelled || w.Phase[i] == pRefused {
		bad(4, "run %d admitted after it was %v", i, w.Phase[i])
	}
	if fromQueue {
		for j := range gRuns {
			if j != i && w.Waiting[j] && w.In[j] == s && !w.Paused[j] && places[j].Before(places[i]) {
				bad(3, "run %d admitted from shard %d's queue before run %d", i, s, j)
			}
		}
	}
	w.Waiting[i], w.Admitted[i], w.In[i] = false, true, s
	w.Phase[i], w.NeedStart[i] = pAdmitted, true
}

// tryEntry runs r's entry's next step.
func (w *gworld) tryEntry(c gconfig, i int, bad gbad) {
	if w.Phase[i] != pEntering { // cancelled meanwhile: the entry's run condition fails
		w.Try[i] = -1
		return
	}
	order := Order(gHome[i], gShards)
	if w.Try[i] < gShards {
		s := order[w.Try[i]]
		if ok, _ := w.Sh[s].Room(Rate{}, mt0); ok && w.Sh[s].Waiting == 0 {
			n, _, _, _ := w.Sh[s].Enter(Rate{}, mt0, 2)
			if h := w.head(s); h >= 0 {
				bad(3, "run %d admitted at once in shard %d while run %d waits", i, s, h)
			}
			w.Sh[s] = n
			w.admit(i, s, false, bad)
			w.Try[i] = -1
			return
		}
		w.Try[i]++
		return
	}
	s := gHome[i]
	n, admitted, _, err := w.Sh[s].Enter(Rate{}, mt0, 2)
	w.Try[i] = -1
	switch {
	case err != nil:
		w.Phase[i] = pRefused
		return
	case admitted:
		w.Sh[s] = n
		if h := w.head(s); h >= 0 {
			bad(3, "run %d admitted at once in shard %d while run %d waits", i, s, h)
		}
		w.admit(i, s, false, bad)
	default:
		w.Sh[s] = n
		w.Waiting[i], w.In[i], w.Phase[i] = true, s, pWaiting
		w.spawnBorrow()
	}
}

func (w *gworld) release(i int) {
	if w.Admitted[i] { // the admitted item's delete is the condition
		s := w.In[i]
		w.Admitted[i] = false
		w.Sh[s] = w.Sh[s].Release()
		w.spawnPass(s)
	}
}

// stepPass runs one step of shard s's pass: its read, or its conditional
// write.
func (w *gworld) stepPass(s int, bad gbad) {
	o := &w.Pass[s]
	if !o.Read {
		o.Read, o.V[s], o.Head = true, w.Sh[s].Version, w.head(s)
		return
	}
	if o.V[s] != w.Sh[s].Version {
		*o = gop{On: true} // condition failed: read again
		return
	}
	n, ok := w.Sh[s].AdmitWaiting(Rate{}, mt0)
	if o.Head < 0 || !ok {
		*o = gop{}
		w.spawnBorrow()
		return
	}
	w.Sh[s] = n
	w.admit(o.Head, s, true, bad)
	*o = gop{On: true} // the pass goes on
}

// stepBorrow runs one step of the borrow: its read of the shards, or its
// write conditioned on both versions.
func (w *gworld) stepBorrow(c gconfig) {
	o := &w.Borrow
	if !o.Read {
		o.Read, o.From, o.To = true, -1, -1
		for s := range gShards {
			o.V[s] = w.Sh[s].Version
			h := w.head(s) >= 0
			if o.From < 0 && w.Sh[s].CanLend(h) {
				o.From = s
			}
			if o.To < 0 && w.Sh[s].Short(h) {
				o.To = s
			}
		}
		if o.From < 0 || o.To < 0 || o.From == o.To {
			*o = gop{}
		}
		return
	}
	if o.V[o.From] != w.Sh[o.From].Version || o.V[o.To] != w.Sh[o.To].Version {
		*o = gop{On: true} // a condition failed: read again
		return
	}
	w.Sh[o.From], w.Sh[o.To] = Borrow(w.Sh[o.From], w.Sh[o.To])
	to := o.To
	*o = gop{On: true} // the borrow goes on: another may be short
	w.spawnPass(to)
}

func (w *gworld) tick(c gconfig) {
	for i := range gRuns {
		if w.Phase[i] == pEnded && w.Admitted[i] {
			w.release(i)
		}
		if w.Phase[i] == pAdmitted {
			w.Phase[i], w.NeedStart[i] = pActive, false
		}
		if w.Phase[i] == pEntering && w.Try[i] < 0 {
			w.Try[i] = 0 // the run's timer enters it again
		}
	}
	for s := range gShards {
		w.spawnPass(s)
	}
	w.spawnBorrow()
}

type gevent struct {
	name    string
	oneShot int
	apply   func(c gconfig, w *gworld, bad gbad) bool
}

func gevents(c gconfig) []gevent {
	var evs []gevent
	bit := 0
	once := func(name string, f func(gconfig, *gworld, gbad) bool) {
		evs = append(evs, gevent{name, bit, f})
		bit++
	}
	rep := func(name string, f func(gconfig, *gworld, gbad) bool) {
		evs = append(evs, gevent{name, -1, f})
	}
	for i := range gRuns {
		rep(fmt.Sprintf("create-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if w.Phase[i] != pNone {
				return false
			}
			w.Phase[i], w.Try[i] = pEntering, 0
			return true
		})
		rep(fmt.Sprintf("try-%d", i), func(c gconfig, w *gworld, bad gbad) bool {
			if w.Try[i] < 0 {
				return false
			}
			w.tryEntry(c, i, bad)
			return true
		})
		rep(fmt.Sprintf("start-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if !w.NeedStart[i] {
				return false
			}
			w.NeedStart[i] = false
			if w.Phase[i] == pAdmitted {
				w.Phase[i] = pActive
			}
			return true
		})
		rep(fmt.Sprintf("end-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if w.Phase[i] != pActive {
				return false
			}
			w.Phase[i], w.NeedRelease[i] = pEnded, true
			return true
		})
		rep(fmt.Sprintf("release-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if !w.NeedRelease[i] {
				return false
			}
			w.NeedRelease[i] = false
			w.release(i)
			return true
		})
		rep(fmt.Sprintf("crash-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if !w.NeedRelease[i] && !w.NeedStart[i] && w.Try[i] < 0 {
				return false
			}
			w.NeedRelease[i], w.NeedStart[i], w.Try[i] = false, false, -1
			return true
		})
		if i != 1 {
			continue // one run pauses and is cancelled
		}
		rep(fmt.Sprintf("cancel-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			switch w.Phase[i] {
			case pWaiting:
				s := w.In[i]
				w.Waiting[i], w.Paused[i] = false, false
				w.Sh[s] = w.Sh[s].Withdraw()
				w.spawnPass(s)
			case pNone, pEntering:
			default:
				return false
			}
			w.Phase[i] = pCancelled
			return true
		})
		once(fmt.Sprintf("pause-%d", i), func(_ gconfig, w *gworld, _ gbad) bool {
			if !w.Waiting[i] || w.Paused[i] {
				return false
			}
			w.Paused[i] = true
			w.Sh[w.In[i]] = w.Sh[w.In[i]].Touch()
			return true
		})
	}
	for sh := range gShards {
		rep(fmt.Sprintf("pass-%d", sh), func(_ gconfig, w *gworld, bad gbad) bool {
			if !w.Pass[sh].On {
				return false
			}
			w.stepPass(sh, bad)
			return true
		})
		rep(fmt.Sprintf("drop-pass-%d", sh), func(_ gconfig, w *gworld, _ gbad) bool {
			if !w.Pass[sh].On {
				return false
			}
			w.Pass[sh] = gop{}
			return true
		})
	}
	rep("borrow", func(c gconfig, w *gworld, _ gbad) bool {
		if !w.Borrow.On {
			return false
		}
		w.stepBorrow(c)
		return true
	})
	rep("drop-borrow", func(_ gconfig, w *gworld, _ gbad) bool {
		if !w.Borrow.On {
			return false
		}
		w.Borrow = gop{}
		return true
	})
	reshare := func(w *gworld, limit int) {
		w.Limit = limit
		next := Reshare(w.Sh[:], limit)
		if c.NaiveReshare {
			for s, share := range Shares(limit, gShards) {
				next[s].Limit = share
			}
		}
		for s, st := range next {
			w.Sh[s] = st
			w.spawnPass(s)
		}
		w.spawnBorrow()
	}
	once("raise", func(c gconfig, w *gworld, _ gbad) bool {
		reshare(w, c.Limit+1)
		return true
	})
	once("lower", func(c gconfig, w *gworld, _ gbad) bool {
		if w.Limit == c.Limit {
			return false
		}
		reshare(w, c.Limit)
		return true
	})
	rep("tick", func(c gconfig, w *gworld, _ gbad) bool {
		w.tick(c)
		return true
	})
	return evs
}

func gcheckCounters(w *gworld, bad gbad) {
	sum := 0
	for s := range gShards {
		held, waiting := 0, 0
		for i := range gRuns {
			if w.Admitted[i] && w.In[i] == s {
				held++
			}
			if w.Waiting[i] && w.In[i] == s {
				waiting++
			}
		}
		if held != w.Sh[s].Active || waiting != w.Sh[s].Waiting {
			bad(2, "shard %d counters active %d waiting %d, items %d and %d", s, w.Sh[s].Active, w.Sh[s].Waiting, held, waiting)
		}
		sum += w.Sh[s].Limit
	}
	if sum != w.Limit {
		bad(2, "shares sum to %d, the group's limit is %d", sum, w.Limit)
	}
}

// gsettle runs every pending step, ticks and settles again, then checks
// invariant 5.
func gsettle(c gconfig, w gworld, bad gbad) {
	quiet := func(int, string, ...any) {}
	drain := func() {
		for range 200 {
			moved := false
			for i := range gRuns {
				if w.NeedStart[i] {
					w.NeedStart[i] = false
					if w.Phase[i] == pAdmitted {
						w.Phase[i] = pActive
					}
					moved = true
				}
				if w.NeedRelease[i] {
					w.NeedRelease[i] = false
					w.release(i)
					moved = true
				}
				if w.Try[i] >= 0 {
					w.tryEntry(c, i, quiet)
					moved = true
				}
			}
			for s := range gShards {
				if w.Pass[s].On {
					w.stepPass(s, quiet)
					moved = true
				}
			}
			if w.Borrow.On {
				w.stepBorrow(c)
				moved = true
			}
			if !moved {
				return
			}
		}
		bad(5, "pending steps never finish")
	}
	drain()
	w.tick(c)
	drain()
	if w.held() < w.Limit {
		for s := range gShards {
			if h := w.head(s); h >= 0 {
				bad(5, "run %d waits in shard %d while the group holds %d of %d (%+v)", h, s, w.held(), w.Limit, w.Sh)
			}
		}
	}
	for i := range gRuns {
		if w.Phase[i] == pEnded && w.Admitted[i] {
			bad(5, "ended run %d still holds room", i)
		}
		if w.Phase[i] == pAdmitted {
			bad(5, "admitted run %d never started", i)
		}
	}
}

func gmodelCheck(c gconfig, maxStates int) result {
	var res result
	evs := gevents(c)
	start := newGWorld(c)
	seen := map[string]bool{start.key(): true}
	queue := []gworld{start}
	for len(queue) > 0 && len(seen) <= maxStates {
		if c.StopOn != "" && res.perInvariant[c.StopOn] > 0 {
			return res
		}
		cur := queue[0]
		queue = queue[1:]
		res.States++
		gsettle(c, cur.clone(), func(inv int, f string, a ...any) {
			res.add(fmt.Sprintf("invariant %d: %s", inv, fmt.Sprintf(f, a...)))
		})
		for _, e := range evs {
			if e.oneShot >= 0 && cur.Used&(1<<e.oneShot) != 0 {
				continue
			}
			n := cur.clone()
			var v []string
			bad := func(inv int, f string, a ...any) {
				v = append(v, fmt.Sprintf("invariant %d: %s: %s", inv, e.name, fmt.Sprintf(f, a...)))
			}
			if !e.apply(c, &n, bad) {
				continue
			}
			res.Transitions++
			if e.oneShot >= 0 {
				n.Used |= 1 << e.oneShot
			}
			gcheckCounters(&n, bad)
			res.add(v...)
			if k := n.key(); !seen[k] {
				seen[k] = true
				queue = append(queue, n)
			}
		}
	}
	if len(queue) > 0 {
		res.Violations = append(res.Violations, fmt.Sprintf("state bound %d reached with %d unexplored", maxStates, len(queue)))
	}
	return res
}

var groupMaxStates = maxStates

func TestModelCheckGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive exploration; run without -short")
	}
	began := time.Now()
	res := gmodelCheck(gconfig{Limit: 2}, groupMaxStates)
	fmt.Printf("limiter group model check (%d shards, limit 2): %d states, %d transitions, %d violations, %s\n",
		gShards, res.States, res.Transitions, len(res.Violations), time.Since(began).Round(time.Millisecond))
	for _, v := range res.Violations {
		t.Error(v)
	}
	if res.States < 1000 {
		t.Fatalf("only %d states reached: the alphabet is not exercising the model", res.States)
	}
}

func TestModelCheckCatchesBrokenGroups(t *testing.T) {
	for name, tc := range map[string]struct {
		c   gconfig
		inv string
	}{
		"shards that never borrow":     {gconfig{Limit: 2, NoBorrow: true}, "invariant 5"},
		"a lowered limit split evenly": {gconfig{Limit: 2, NaiveReshare: true}, "invariant 1"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.c.StopOn = tc.inv
			res := gmodelCheck(tc.c, 300_000)
			found := false
			for _, v := range res.Violations {
				found = found || strings.HasPrefix(v, tc.inv)
			}
			if !found {
				t.Fatalf("model check missed the defect; %d violations: %v", len(res.Violations), res.Violations[:min(3, len(res.Violations))])
			}
		})
	}
}
