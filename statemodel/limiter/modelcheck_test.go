package limiter

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The model check explores every interleaving of the limiter's store
// protocol, as the stores run it, with its writes as atomic steps:
//
//   - create(r): one conditional write enters r (admitted at once, or a
//     waiting item, or refused when the queue is full);
//   - start(r): the handler that admitted r dispatches it;
//   - end(r): r's terminal write; release(r) is its handler's next step (the
//     admitted item deleted and the counter lowered in one write), which
//     then hands room on by starting an admit-next pass;
//   - an admit-next pass is two steps: read the limiter and the queue's head,
//     then write the admission on condition that the limiter's version is
//     unchanged (else read again);
//   - cancel, pause and resume of a waiting run, the limit raised and
//     lowered, the clock moving past the rate window;
//   - a crash drops any handler step still to run (start, release, a pass);
//   - tick is the ticker's repair: it releases ended runs that still hold
//     room, starts admitted runs not started, and runs an admit-next pass.
//
// Invariants, on every edge:
//  1. an admission happens only with room: admitted items < limit before it,
//     and at most Runs admissions inside any rate window;
//  2. the counters are exact: Active = admitted items, Waiting = waiting
//     items <= the queue bound;
//  3. a run admitted from the queue has no unpaused waiting run before it
//     (priority, then created_at); a run admitted at once found nobody
//     waiting;
//  4. a cancelled or refused run is never admitted;
//
// and from every reachable state, once every pending step has run and the
// ticker has run once (the clock past the window first, as the run's
// rate-limit timer would):
//  5. no unpaused run waits while the limiter has room, every ended run has
//     handed its room back, every admitted run is started.

type phase uint8

const (
	pNone phase = iota
	pWaiting
	pAdmitted // admitted, its handler has not yet dispatched it
	pActive
	pEnded
	pCancelled
	pRefused
)

const nRuns = 3

type pass struct {
	Read    bool
	Version int64
	Head    int // -1: no unpaused waiting run
	// Active as read, kept only by the broken variant that decides on it
	Active int
}

type world struct {
	Lim         State
	Phase       [nRuns]phase
	Paused      [nRuns]bool
	Waiting     [nRuns]bool // waiting items
	Admitted    [nRuns]bool // admitted items
	NeedStart   [nRuns]bool
	NeedRelease [nRuns]bool
	Passes      []pass
	Clock       int
	Used        uint64 // one-shot events already applied
}

type config struct {
	Limit      int
	Rate       Rate
	MaxWaiting int
	Clock      int // how many times the clock may move
	// broken variants, each a defect the check must catch
	NoVersionCheck bool   // admit-next writes without checking the version
	JumpQueue      bool   // create admits with room even when runs wait
	TickForgets    bool   // the ticker does not release ended runs
	StopOn         string // stop at the first violation of this invariant
}

var places = [nRuns]Place{
	{Priority: 3, CreatedAt: mt0, RunID: "r0"},
	{Priority: 1, CreatedAt: mt0.Add(time.Second), RunID: "r1"},
	{Priority: 3, CreatedAt: mt0.Add(2 * time.Second), RunID: "r2"},
}

var mt0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (c config) now(w *world) time.Time {
	return mt0.Add(time.Duration(w.Clock) * time.Minute)
}

func (w world) clone() world {
	w.Lim = w.Lim.clone()
	w.Passes = append([]pass(nil), w.Passes...)
	return w
}

// key identifies a world up to its versions: only whether a pass's read is
// still current matters, so the graph stays finite.
func (w world) key() string {
	ps := make([]string, len(w.Passes))
	for i, p := range w.Passes {
		ps[i] = fmt.Sprint(p.Read, p.Head, p.Active, p.Version == w.Lim.Version)
	}
	w.Passes = nil
	w.Lim.Version = 0
	return fmt.Sprintf("%+v %v", w, ps)
}

// spawn starts an admit-next pass unless one not yet read is pending: that
// one reads the newer state anyway.
func (w *world) spawn() {
	for _, p := range w.Passes {
		if !p.Read {
			return
		}
	}
	w.Passes = append(w.Passes, pass{})
}

func (w *world) head() int {
	h := -1
	for i := range nRuns {
		if w.Waiting[i] && !w.Paused[i] && (h < 0 || places[i].Before(places[h])) {
			h = i
		}
	}
	return h
}

type event struct {
	name    string
	oneShot int // bit in Used, -1 repeatable
	apply   func(c config, w *world, bad func(inv int, f string, a ...any)) bool
}

func events(c config) []event {
	var evs []event
	bit := 0
	once := func(name string, f func(c config, w *world, bad func(int, string, ...any)) bool) {
		evs = append(evs, event{name, bit, f})
		bit++
	}
	rep := func(name string, f func(c config, w *world, bad func(int, string, ...any)) bool) {
		evs = append(evs, event{name, -1, f})
	}
	for i := range nRuns {
		rep(fmt.Sprintf("create-%d", i), func(c config, w *world, bad func(int, string, ...any)) bool {
			if w.Phase[i] != pNone {
				return false
			}
			lim := w.Lim
			if c.JumpQueue {
				lim.Waiting = 0
			}
			n, admitted, _, err := lim.Enter(c.Rate, c.now(w), c.MaxWaiting)
			if c.JumpQueue {
				n.Waiting += w.Lim.Waiting
			}
			switch {
			case err != nil:
				w.Phase[i] = pRefused
			case admitted:
				checkAdmission(c, w, i, bad)
				if h := w.head(); h >= 0 {
					bad(3, "run %d admitted at once while run %d waits", i, h)
				}
				w.Admitted[i], w.Phase[i], w.NeedStart[i] = true, pAdmitted, true
			default:
				w.Waiting[i], w.Phase[i] = true, pWaiting
			}
			w.Lim = n
			return true
		})
		rep(fmt.Sprintf("start-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if !w.NeedStart[i] {
				return false
			}
			w.NeedStart[i] = false
			if w.Phase[i] == pAdmitted {
				w.Phase[i] = pActive
			}
			return true
		})
		rep(fmt.Sprintf("end-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if w.Phase[i] != pActive {
				return false
			}
			w.Phase[i], w.NeedRelease[i] = pEnded, true
			return true
		})
		rep(fmt.Sprintf("release-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if !w.NeedRelease[i] {
				return false
			}
			w.NeedRelease[i] = false
			release(w, i)
			return true
		})
		rep(fmt.Sprintf("crash-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if !w.NeedRelease[i] && !w.NeedStart[i] {
				return false
			}
			w.NeedRelease[i], w.NeedStart[i] = false, false
			return true
		})
		rep(fmt.Sprintf("cancel-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if i != 1 {
				return false
			}
			switch w.Phase[i] {
			case pWaiting:
				w.Waiting[i], w.Paused[i] = false, false
				w.Lim = w.Lim.Withdraw()
				w.Phase[i] = pCancelled
				w.spawn()
			case pNone:
				w.Phase[i] = pCancelled
			default:
				return false
			}
			return true
		})
		if i != 1 {
			continue // one run pauses and is cancelled: the one first in order
		}
		once(fmt.Sprintf("pause-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if !w.Waiting[i] || w.Paused[i] {
				return false
			}
			w.Paused[i] = true
			w.Lim = w.Lim.Touch()
			return true
		})
		once(fmt.Sprintf("resume-%d", i), func(c config, w *world, _ func(int, string, ...any)) bool {
			if !w.Waiting[i] || !w.Paused[i] {
				return false
			}
			w.Paused[i] = false
			w.Lim = w.Lim.Touch()
			w.spawn()
			return true
		})
	}
	for k := range 2 {
		rep(fmt.Sprintf("pass-%d", k), func(c config, w *world, bad func(int, string, ...any)) bool {
			if k >= len(w.Passes) {
				return false
			}
			stepPass(c, w, k, bad)
			return true
		})
		rep(fmt.Sprintf("drop-pass-%d", k), func(c config, w *world, _ func(int, string, ...any)) bool {
			if k != len(w.Passes)-1 {
				return false
			}
			w.Passes = append(w.Passes[:k], w.Passes[k+1:]...)
			return true
		})
	}
	if c.Limit > 0 {
		once("raise", func(c config, w *world, _ func(int, string, ...any)) bool {
			w.Lim = w.Lim.SetLimit(c.Limit + 1)
			w.spawn()
			return true
		})
		once("lower", func(c config, w *world, _ func(int, string, ...any)) bool {
			if w.Lim.Limit == c.Limit {
				return false
			}
			w.Lim = w.Lim.SetLimit(c.Limit)
			return true
		})
	}
	rep("clock", func(c config, w *world, _ func(int, string, ...any)) bool {
		if w.Clock >= c.Clock {
			return false
		}
		w.Clock++
		return true
	})
	rep("tick", func(c config, w *world, _ func(int, string, ...any)) bool {
		tick(c, w)
		return true
	})
	return evs
}

func release(w *world, i int) {
	if w.Admitted[i] { // the admitted item's delete is the condition
		w.Admitted[i] = false
		w.Lim = w.Lim.Release()
	}
	w.spawn()
}

func tick(c config, w *world) {
	for i := range nRuns {
		if w.Phase[i] == pEnded && w.Admitted[i] && !c.TickForgets {
			release(w, i)
		}
		if w.Phase[i] == pAdmitted {
			w.Phase[i] = pActive
			w.NeedStart[i] = false
		}
	}
	w.spawn()
}

// stepPass runs one step of pass k: its read, or its conditional write.
func stepPass(c config, w *world, k int, bad func(int, string, ...any)) {
	p := &w.Passes[k]
	if !p.Read {
		*p = pass{Read: true, Version: w.Lim.Version, Head: w.head()}
		if c.NoVersionCheck {
			p.Active = w.Lim.Active
		}
		return
	}
	if p.Version != w.Lim.Version && !c.NoVersionCheck {
		*p = pass{} // condition failed: read again
		return
	}
	h := p.Head
	n, ok := w.Lim.AdmitWaiting(c.Rate, c.now(w))
	if c.NoVersionCheck {
		// the defect: the decision taken on the old read, written blindly
		old := w.Lim
		old.Active = p.Active
		n, ok = old.AdmitWaiting(c.Rate, c.now(w))
		n.Active, n.Waiting = w.Lim.Active+1, w.Lim.Waiting-1
		ok = ok && h >= 0 && w.Waiting[h]
	}
	if h < 0 || !ok {
		w.Passes = append(w.Passes[:k], w.Passes[k+1:]...)
		return
	}
	checkAdmission(c, w, h, bad)
	for j := range nRuns {
		if w.Waiting[j] && !w.Paused[j] && places[j].Before(places[h]) {
			bad(3, "run %d admitted from the queue before run %d", h, j)
		}
	}
	w.Lim = n
	w.Waiting[h], w.Admitted[h], w.Phase[h], w.NeedStart[h] = false, true, pAdmitted, true
	*p = pass{} // the pass goes on: read again
}

func checkAdmission(c config, w *world, i int, bad func(int, string, ...any)) {
	held := 0
	for j := range nRuns {
		if w.Admitted[j] {
			held++
		}
	}
	if w.Lim.Limit > 0 && held >= w.Lim.Limit {
		bad(1, "run %d admitted with %d of %d held", i, held, w.Lim.Limit)
	}
	if c.Rate.On() && w.Lim.inWindow(c.Rate, c.now(w)) >= c.Rate.Runs {
		bad(1, "run %d admitted beyond the rate window", i)
	}
	if w.Phase[i] == pCancelled || w.Phase[i] == pRefused {
		bad(4, "run %d admitted after it was %v", i, w.Phase[i])
	}
}

func checkCounters(c config, w *world, bad func(int, string, ...any)) {
	held, waiting := 0, 0
	for i := range nRuns {
		if w.Admitted[i] {
			held++
		}
		if w.Waiting[i] {
			waiting++
		}
	}
	if held != w.Lim.Active || waiting != w.Lim.Waiting || waiting > c.MaxWaiting {
		bad(2, "counters active %d waiting %d, items %d and %d", w.Lim.Active, w.Lim.Waiting, held, waiting)
	}
}

// settle runs every pending step, moves the clock past the window, ticks
// and settles again, then checks invariant 5.
func settle(c config, w world, bad func(int, string, ...any)) {
	drain := func() {
		for range 100 {
			moved := false
			for i := range nRuns {
				if w.NeedStart[i] {
					w.NeedStart[i] = false
					if w.Phase[i] == pAdmitted {
						w.Phase[i] = pActive
					}
					moved = true
				}
				if w.NeedRelease[i] {
					w.NeedRelease[i] = false
					release(&w, i)
					moved = true
				}
			}
			if len(w.Passes) > 0 {
				stepPass(c, &w, 0, func(int, string, ...any) {})
				moved = true
			}
			if !moved {
				return
			}
		}
		bad(5, "pending steps never finish")
	}
	drain()
	if c.Rate.On() {
		w.Clock += 100 // the run's rate-limit timer is due
	}
	tick(c, &w)
	drain()
	if h := w.head(); h >= 0 {
		if ok, _ := w.Lim.Room(c.Rate, c.now(&w)); ok {
			bad(5, "run %d waits while the limiter has room (%+v)", h, w.Lim)
		}
	}
	for i := range nRuns {
		if w.Phase[i] == pEnded && w.Admitted[i] {
			bad(5, "ended run %d still holds room", i)
		}
		if w.Phase[i] == pAdmitted {
			bad(5, "admitted run %d never started", i)
		}
	}
}

type result struct {
	States, Transitions int
	Violations          []string
	perInvariant        map[string]int
}

// add keeps the first three violations of each invariant, so that one
// defect's many paths do not hide another's.
func (r *result) add(vs ...string) {
	if r.perInvariant == nil {
		r.perInvariant = map[string]int{}
	}
	for _, v := range vs {
		inv, _, _ := strings.Cut(v, ":")
		if r.perInvariant[inv]++; r.perInvariant[inv] <= 3 {
			r.Violations = append(r.Violations, v)
		}
	}
}

func modelCheck(c config, maxStates int) result {
	var res result
	evs := events(c)
	start := world{Lim: State{Limit: c.Limit}}
	seen := map[string]bool{start.key(): true}
	queue := []world{start}
	for len(queue) > 0 && len(seen) <= maxStates {
		if c.StopOn != "" && res.perInvariant[c.StopOn] > 0 {
			return res
		}
		cur := queue[0]
		queue = queue[1:]
		res.States++
		settle(c, cur.clone(), func(inv int, f string, a ...any) {
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
			checkCounters(c, &n, bad)
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

const maxStates = 3_000_000

func TestModelCheckConcurrency(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive exploration; run without -short")
	}
	for name, c := range map[string]config{
		"limit 1, queue of 2":        {Limit: 1, MaxWaiting: 2},
		"limit 1, queue of 1 (full)": {Limit: 1, MaxWaiting: 1},
		"rate 1 a minute":            {Rate: Rate{Runs: 1, Per: time.Minute}, MaxWaiting: 2, Clock: 2},
		"limit 2 and rate 2 a minute": {Limit: 2, Rate: Rate{Runs: 2, Per: time.Minute},
			MaxWaiting: 2, Clock: 1},
	} {
		t.Run(name, func(t *testing.T) {
			res := modelCheck(c, maxStates)
			fmt.Printf("limiter model check (%s): %d states, %d transitions, %d violations\n", name, res.States, res.Transitions, len(res.Violations))
			for _, v := range res.Violations {
				t.Error(v)
			}
			if res.States < 1000 {
				t.Fatalf("only %d states reached: the alphabet is not exercising the model", res.States)
			}
		})
	}
}

func TestModelCheckCatchesBrokenLimiters(t *testing.T) {
	for name, tc := range map[string]struct {
		c   config
		inv string
	}{
		"admits without the version condition": {config{Limit: 1, MaxWaiting: 2, NoVersionCheck: true}, "invariant 1"},
		"a new run jumps the queue":            {config{Limit: 1, MaxWaiting: 2, JumpQueue: true}, "invariant 3"},
		"the ticker forgets lost releases":     {config{Limit: 1, MaxWaiting: 2, TickForgets: true}, "invariant 5"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.c.StopOn = tc.inv
			res := modelCheck(tc.c, 300_000)
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
