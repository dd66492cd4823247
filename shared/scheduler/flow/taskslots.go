package flow

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
	"github.com/runledger/runledger/statemodel/limiter"
)

// A task with a concurrency (a pool of slots shared by every job naming its
// group) holds a slot of its limiter from its dispatch until its attempt
// leaves flight. The slots are the run limiters' store (ledger.Limiters)
// and functions: the holder is the task instance, "<run>/<task>", in the
// Place's RunID.
//
//   - Dispatch (the kernel's, through HoldSlot) writes the task's
//     dependency verdict on its own first, so the task is SCHEDULED, then
//     enters the limiter. Admitted: it is sent as any task. Waiting: nothing is sent and the
//     task waits SCHEDULED (its answer carries waiting_for_slot).
//   - A transition into UP_FOR_RETRY or a terminal state (FreeSlot) gives
//     the slot back, or withdraws the task from the queue, and hands the
//     room on: each holder admitted then is dispatched. A retry that falls
//     due is dispatched again and so takes a slot again. LOST ->
//     SCHEDULED (resubmit) keeps its slot.
//   - A waiting task's dispatch timer (the ticker) repairs its limiter: a
//     holder whose task ended (or went UP_FOR_RETRY after the holder was
//     admitted) while its release was lost in a crash is released, and the
//     room handed on. Nothing else reads a limiter that had no room.

// taskLimiterPrefix keeps task limiters apart from run limiters in the
// store: a job group and a task group of one name are separate limiters.
// No job or group name holds ':'.
const taskLimiterPrefix = "task:"

// TaskSlot is a task instance's place in its task limiter.
type TaskSlot struct {
	// shown is the limiter as the task answer names it
	// (waiting_for_slot): "<group or job name>/<rendered key>"; name is
	// its store name.
	shown, name string
	limit       int
	place       limiter.Place
}

// SlotOf is the task limiter key's instance stands in (a map child: its
// map task's), false for a task without a concurrency.
func (r *Room) SlotOf(run ledger.Run, key ledger.InstanceKey) (TaskSlot, bool) {
	if !bytes.Contains(run.Spec, []byte(`"concurrency"`)) {
		return TaskSlot{}, false // nothing to parse
	}
	cj, err := r.k.Compiled(run.Spec)
	if err != nil {
		return TaskSlot{}, false
	}
	defID := key.Task
	if parent, _, ok := ledger.ParseChild(key.Task); ok {
		defID = parent // a map child: its map task's
	}
	c := cj.TaskConcurrency(defID)
	if c == nil {
		return TaskSlot{}, false
	}
	data := keyData(run)
	data["Task"] = defID
	k, err := cj.TaskKey(defID, data)
	if err != nil {
		k = "" // as a run's key the scheduler cannot render
	}
	group := c.Group
	if group == "" {
		group = cj.Job.Name
	}
	shown := limiter.Name(group, k)
	return TaskSlot{
		shown: shown, name: taskLimiterPrefix + shown, limit: c.Limit,
		place: limiter.Place{Priority: Priority(cj, run), CreatedAt: run.CreatedAt, RunID: holderID(key)},
	}, true
}

// holderID is a task instance's id in its limiter.
func holderID(key ledger.InstanceKey) string { return key.Run + "/" + key.Task }

// holderKey is holderID's inverse (a task id holds no '/').
func holderKey(id string) (ledger.InstanceKey, bool) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 || i == len(id)-1 {
		return ledger.InstanceKey{}, false
	}
	return ledger.InstanceKey{Run: id[:i], Task: id[i+1:]}, true
}

// takeSlot enters a SCHEDULED instance in its limiter unless it is there
// already, and reports whether it holds a slot (it may be sent). outer:
// the hand-off whose effects dispatch it (nil: none), which the holders a
// release or repair hands the room on to carry.
func (r *Room) takeSlot(ctx context.Context, inst ledger.Instance, sl TaskSlot, outer *HandOff) (bool, error) {
	at, err := ledger.FindInLimiter(ctx, r.store, sl.name, sl.place)
	if err != nil || at.Admitted {
		return at.Admitted, err
	}
	if at.Reason != "" {
		// Still waiting (its timer's pass): repair a release lost in a
		// crash, then look again; once per limiter and process within
		// slotRepairEvery, however many of its tasks wait.
		if !r.slots.repairDue(sl.name) {
			return false, nil
		}
		if err := r.repairSlots(ctx, sl.name, outer); err != nil {
			return false, err
		}
		at, err = ledger.FindInLimiter(ctx, r.store, sl.name, sl.place)
		return at.Admitted, err
	}
	e, err := r.turns.EnterLimiter(ctx, r.store, ledger.Entry{Limiter: sl.name, Limit: sl.limit, Place: sl.place}, r.now())
	if errors.Is(err, ledger.ErrLimitQueueFull) {
		return false, nil // its timer's next pass tries again
	}
	if err != nil {
		return false, err
	}
	// The instance may have ended since it was read (a cancel whose
	// release found nothing to give back): it leaves again at once. One
	// that ends after this read is released by its ender.
	if now, err := r.store.GetInstance(ctx, inst.Key); err == nil && slotDone(now, time.Time{}) {
		r.releaseSlot(ctx, sl, outer)
		return false, nil
	}
	return e.Admitted, nil
}

// slotDone reports whether a holder admitted at admittedAt (zero: not
// admitted) is to give its slot back: its task ended or is paused, or went
// UP_FOR_RETRY after the attempt the slot was taken for (a holder
// admitted again for the retry, about to be dispatched, keeps it).
func slotDone(inst ledger.Instance, admittedAt time.Time) bool {
	snap := inst.Snapshot
	switch {
	case snap.State.Terminal() || snap.State == statemodel.StatePaused:
		return true
	case snap.State != statemodel.StateUpForRetry:
		return false
	case admittedAt.IsZero():
		return true
	}
	cur, ok := snap.Current()
	return !ok || !admittedAt.After(cur.EndedAt)
}

// ReleasesSlot reports whether a transition takes a task out of flight
// (or out of its wait for a slot): a paused task gives its slot or its
// place back too, and takes one again when resumed and dispatched.
func ReleasesSlot(tr statemodel.Transition) bool {
	if tr.From == statemodel.StateCreated {
		return false
	}
	return tr.To == statemodel.StateUpForRetry || tr.To == statemodel.StatePaused || tr.To.Terminal()
}

// FreeSlot gives back the slot of an instance a transition took out of
// flight, when its task has a concurrency.
func (r *Room) FreeSlot(ctx context.Context, inst ledger.Instance) {
	if !r.jobMayHoldSlots(ctx, inst.Job) {
		return
	}
	run, err := r.store.GetRun(ctx, inst.Key.Run)
	if err != nil {
		if !errors.Is(err, ledger.ErrNotFound) {
			r.log.WarnContext(ctx, "task slot not released", "run_id", inst.Key.Run, "task", inst.Key.Task, "error", err.Error())
		}
		return
	}
	if sl, ok := r.SlotOf(run, inst.Key); ok {
		r.releaseSlot(ctx, sl, nil)
	}
}

// releaseSlot gives a holder's slot back, or takes it out of the queue,
// and hands the room on. outer: the hand-off whose effects release it
// (nil: none).
func (r *Room) releaseSlot(ctx context.Context, sl TaskSlot, outer *HandOff) {
	var err error
	for range 3 {
		// Admitted, waiting or neither; a hand-off may admit it between
		// the two looks.
		var done bool
		if done, err = r.turns.LeaveLimiter(ctx, r.store, sl.name, sl.place.RunID); err != nil || done {
			break
		}
		if done, err = r.turns.WithdrawWaiting(ctx, r.store, sl.name, sl.place); err != nil || done {
			break
		}
	}
	if err == nil {
		err = r.handOnSlots(ctx, sl.name, outer)
	}
	if err != nil {
		// A waiting task's timer repairs it.
		r.log.WarnContext(ctx, "task slot hand-off failed", "holder", sl.place.RunID, "limiter", sl.name, "error", err.Error())
	}
}

// handOnSlots admits the limiter's next holders while it has room and
// dispatches each one's task. A holder whose task ended meanwhile gives its
// slot back at once, and the room goes on.
func (r *Room) handOnSlots(ctx context.Context, name string, outer *HandOff) error {
	for range limiterHandOnRounds {
		got, err := r.turns.AdmitNext(ctx, r.store, name, limiter.Rate{}, r.now())
		var work []Work
		freed := false
		for _, a := range got {
			key, ok := holderKey(a.RunID)
			var inst ledger.Instance
			var gerr error
			if ok {
				inst, gerr = r.store.GetInstance(ctx, key)
			}
			switch {
			case gerr != nil && !errors.Is(gerr, ledger.ErrNotFound):
				err = errors.Join(err, gerr) // its timer dispatches it
			case !ok || gerr != nil || slotDone(inst, a.AdmittedAt):
				if _, lerr := r.turns.LeaveLimiter(ctx, r.store, name, a.RunID); lerr != nil {
					err = errors.Join(err, lerr)
				}
				freed = true
			case inst.Snapshot.State == statemodel.StateScheduled:
				work = append(work, Work{Kind: Dispatch, Inst: inst, HandOff: outer})
			}
		}
		r.k.Perform(ctx, work...)
		if err != nil || !freed {
			return err
		}
	}
	return nil
}

// limiterHandOnRounds bounds the rounds of one hand-off whose admitted
// holders had ended.
const limiterHandOnRounds = 8

// repairSlots releases the slots of holders whose tasks left flight while
// their release was lost (a crash between the two writes), then hands the
// room on.
func (r *Room) repairSlots(ctx context.Context, name string, outer *HandOff) error {
	adm, err := r.store.ListAdmitted(ctx, name)
	if err != nil {
		return err
	}
	for _, a := range adm {
		key, ok := holderKey(a.RunID)
		var inst ledger.Instance
		if ok {
			inst, err = r.store.GetInstance(ctx, key)
		}
		if !ok || errors.Is(err, ledger.ErrNotFound) || (err == nil && slotDone(inst, a.AdmittedAt)) {
			if _, err := r.turns.LeaveLimiter(ctx, r.store, name, a.RunID); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return r.handOnSlots(ctx, name, outer)
}

// WaitingForSlot answers, for a run answer, the limiter each SCHEDULED task
// of view waits in for a slot, by task; nil when none waits.
func (r *Room) WaitingForSlot(ctx context.Context, view ledger.RunView) (map[string]string, error) {
	var out map[string]string
	for _, t := range view.Tasks {
		inst := t.Instance
		if inst.Snapshot.State != statemodel.StateScheduled {
			continue
		}
		sl, ok := r.SlotOf(view.Run, inst.Key)
		if !ok {
			continue
		}
		at, err := ledger.FindInLimiter(ctx, r.store, sl.name, sl.place)
		if err != nil {
			return nil, err
		}
		if at.Reason != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[inst.Key.Task] = sl.shown
		}
	}
	return out, nil
}

// slotJobs remembers, for a short while, whether a job's definition gives
// a task a concurrency, so that a task of any other job leaving flight
// reads nothing more. A run's definition is its own (run.Spec): a job
// updated to add a task concurrency within slotJobsTTL of the last look
// leaves its first releases to the waiting tasks' repair.
type slotJobs struct {
	mu   sync.Mutex
	seen map[string]slotJobSeen
	// repaired is when this process last repaired each limiter.
	repaired map[string]time.Time
}

// slotRepairEvery is how often one process repairs one task limiter from
// its waiting tasks' timers: a lost release is rare (a crash between two
// writes), and a limiter with many tasks waiting is looked at once.
const slotRepairEvery = 10 * time.Second

// repairDue reports whether name is to be repaired now, and if so notes it.
func (c *slotJobs) repairDue(name string) bool {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.repaired[name]; ok && now.Sub(at) < slotRepairEvery {
		return false
	}
	if c.repaired == nil || len(c.repaired) > 10_000 {
		c.repaired = map[string]time.Time{}
	}
	c.repaired[name] = now
	return true
}

type slotJobSeen struct {
	may bool
	at  time.Time
}

const slotJobsTTL = 5 * time.Second

// jobMayHoldSlots reports whether a task of job may hold a slot: its
// definition names a task concurrency, or it cannot be read (deleted).
func (r *Room) jobMayHoldSlots(ctx context.Context, job string) bool {
	now := time.Now()
	r.slots.mu.Lock()
	e, ok := r.slots.seen[job]
	r.slots.mu.Unlock()
	if ok && now.Sub(e.at) < slotJobsTTL {
		return e.may
	}
	may := true
	if j, err := r.store.GetJob(ctx, job); err == nil {
		may = r.specMayHoldSlots(j.Spec)
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return true // not cached: asked again next time
	}
	r.slots.mu.Lock()
	if r.slots.seen == nil || len(r.slots.seen) > 10_000 {
		r.slots.seen = map[string]slotJobSeen{}
	}
	r.slots.seen[job] = slotJobSeen{may: may, at: now}
	r.slots.mu.Unlock()
	return may
}

func (r *Room) specMayHoldSlots(spec []byte) bool {
	if !bytes.Contains(spec, []byte(`"concurrency"`)) {
		return false
	}
	c, err := r.k.Compiled(spec)
	if err != nil {
		return true
	}
	for _, d := range c.Job.TaskDefs {
		if d.Concurrency != nil {
			return true
		}
	}
	return false
}

// HoldSlot is a dispatch's look at its task's slot: the instance to send
// (SCHEDULED, its dependency verdict written) when it holds one, else nil
// with the instance as it stands (waiting SCHEDULED, or moved on) and
// what failed. h: the hand-off whose effects dispatch it (nil: none); the
// dispatches of the holders its look hands the room on to carry it.
func (r *Room) HoldSlot(ctx context.Context, inst ledger.Instance, sl TaskSlot, h *HandOff) (*ledger.Instance, ledger.Instance, error) {
	if inst.Snapshot.State == statemodel.StateCreated {
		// The verdict is written before the task enters its limiter, so a
		// hand-off that admits it finds it SCHEDULED and sends it.
		written, won, err := r.k.WriteVerdict(ctx, inst)
		if !won {
			return nil, written, err
		}
		inst = written
	}
	ok, err := r.takeSlot(ctx, inst, sl, h)
	if err != nil || !ok {
		return nil, inst, err
	}
	return &inst, inst, nil
}
