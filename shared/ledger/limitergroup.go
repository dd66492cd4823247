package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runledger/runledger/statemodel/limiter"
)

// A limiter whose limit exceeds limiter.ShardLimit is a group of shard
// limiters (docs/store.md, "A group with a large limit"): shard 0 is the
// limiter's own item, the others limiter.ShardName(name, s), each its own
// partition, each holding a share of the limit, the shares summing to it.
// Every shard is a limiter as the others here are; a group adds the entry
// that tries the shards in turn, the borrow that moves one unit of share
// (Limiters.WriteShares) and the re-share of a new limit. The decisions
// are statemodel/limiter's, whose group model check covers them.

// Group reads a group's shards: shard 0, which says how many there are,
// then the others in one read (Limiters.GetLimiters). A limiter stored
// before groups is a group of one.
func Group(ctx context.Context, s Limiters, name string) ([]limiter.State, error) {
	first, err := s.GetLimiter(ctx, name)
	if err != nil || first.GroupShards() == 1 {
		return []limiter.State{first}, err
	}
	names := make([]string, 0, first.GroupShards()-1)
	for sh := 1; sh < first.GroupShards(); sh++ {
		names = append(names, limiter.ShardName(name, sh))
	}
	rest, err := s.GetLimiters(ctx, names)
	if err != nil {
		return nil, err
	}
	return append([]limiter.State{first}, rest...), nil
}

// GroupCounts is a group's counts summed over its shards: what the
// dashboard and the limiter's API answer show.
func GroupCounts(shards []limiter.State) (limit, active, waiting int) {
	for _, st := range shards {
		limit += st.Limit
		active += st.Active
		waiting += st.Waiting
	}
	return limit, active, waiting
}

// GroupEntered is a group entry's outcome and the shard it landed in (its
// waiting or admitted item's limiter, which the run item records).
type GroupEntered struct {
	Entered
	Shard string
	// Borrowed are the runs the entry's borrow admitted in other
	// shards, by shard (a waiting entry borrows for its home shard).
	Borrowed map[string][]Admitted
}

// EnterGroup enters e.Place's holder in group e.Limiter of limit e.Limit:
// a limit within limiter.ShardLimit on a limiter never sharded is one
// limiter (EnterLimiter). Otherwise the holder enters its home shard,
// trusting the share that shard holds while it records the group's limit
// as e.Limit (else the group is re-shared first: SetGroupLimit); only
// when its home has no room are the other shards read, in one read, and
// those with room and nobody waiting tried in order from home (each
// admits it only so); else it waits in its home shard, which then
// borrows a unit of share from a shard with idle room (Rebalance).
func (t *Turns) EnterGroup(ctx context.Context, s Limiters, e Entry, now time.Time) (GroupEntered, error) {
	if e.Limit <= limiter.ShardLimit {
		en, err := t.EnterLimiter(ctx, s, e, now)
		if !errors.Is(err, ErrGrouped) {
			return GroupEntered{Entered: en, Shard: e.Limiter}, err
		}
	}
	if e.Rate.On() {
		return GroupEntered{}, fmt.Errorf("%w: limiter %s: a rate window is not sharded", ErrInvalidInput, e.Limiter)
	}
	e.Group = e.Limit
	ge, err := t.enterShards(ctx, s, e, now)
	if !errors.Is(err, errReshare) {
		return ge, err
	}
	if _, err := t.SetGroupLimit(ctx, s, e.Limiter, e.Limit); err != nil {
		return GroupEntered{}, err
	}
	// Re-shared: the shares now written are the group's, whatever limit
	// a racing re-share (a newer job update) left them at.
	e.Group = 0
	return t.enterShards(ctx, s, e, now)
}

// enterShards is EnterGroup's entry in the shards: its home first, the
// others read only when the home shard has no room.
func (t *Turns) enterShards(ctx context.Context, s Limiters, e Entry, now time.Time) (GroupEntered, error) {
	shard := func(sh int, admitOnly bool) Entry {
		try := e
		try.Limiter, try.Share, try.AdmitOnly = limiter.ShardName(e.Limiter, sh), true, admitOnly
		return try
	}
	home := limiter.Home(e.Place.RunID, limiter.Shards(e.Limit))
	en, err := t.EnterLimiter(ctx, s, shard(home, true), now)
	if err != nil || en.Admitted || en.Found {
		return GroupEntered{Entered: en, Shard: limiter.ShardName(e.Limiter, home)}, err
	}
	n := max(en.shards, limiter.Shards(e.Limit))
	others := limiter.Order(home, n)[1:]
	names := make([]string, len(others))
	for i, sh := range others {
		names[i] = limiter.ShardName(e.Limiter, sh)
	}
	states, err := s.GetLimiters(ctx, names)
	if err != nil {
		return GroupEntered{}, err
	}
	for i, st := range states {
		if !st.CanLend(st.Waiting > 0) || (e.Group > 0 && st.Group != e.Group) {
			continue
		}
		en, err := t.EnterLimiter(ctx, s, shard(others[i], true), now)
		if errors.Is(err, errReshare) {
			continue // re-shared since the read: the home shard says so too
		}
		if err != nil || en.Admitted || en.Found {
			return GroupEntered{Entered: en, Shard: names[i]}, err
		}
	}
	en, err = t.EnterLimiter(ctx, s, shard(home, false), now)
	if err != nil || en.Admitted {
		return GroupEntered{Entered: en, Shard: limiter.ShardName(e.Limiter, home)}, err
	}
	got, err := t.Rebalance(ctx, s, e.Limiter, now)
	return GroupEntered{Entered: en, Shard: limiter.ShardName(e.Limiter, home), Borrowed: got}, err
}

// SetGroupLimit stores a group's limit: when its shards' shares do not
// sum to limit, a shard does not record it (limiter.State.Group), or it
// needs more shards than it has, the shards are
// re-shared (limiter.Reshare) in one write conditioned on every version
// read, and the shards' count is answered. A group never loses shards
// (each may hold runs); a lowered limit stops nothing already active. The
// caller then hands on each shard's room (AdmitNext) and Rebalances.
func (t *Turns) SetGroupLimit(ctx context.Context, s Limiters, name string, limit int) (int, error) {
	var shards int
	err := Update(ctx, limiterRounds(),
		func(ctx context.Context, _ int) ([]limiter.State, error) {
			g, err := Group(ctx, s, name)
			if err != nil {
				return nil, err
			}
			// New shards beyond shard 0's count are not stored yet, or were
			// stored by a re-share that lost: read them to write on their
			// versions.
			for sh := len(g); sh < limiter.Shards(limit); sh++ {
				st, err := s.GetLimiter(ctx, limiter.ShardName(name, sh))
				if err != nil {
					return nil, err
				}
				g = append(g, st)
			}
			return g, nil
		},
		func(_ context.Context, g []limiter.State) ([]ShareWrite, Step, error) {
			if sum, _, _ := GroupCounts(g); sum == limit && g[0].Version != 0 && recordsLimit(g, limit) {
				shards = len(g)
				return nil, StepDone, nil
			}
			next := limiter.Reshare(g, limit)
			ws := make([]ShareWrite, len(next))
			for sh, st := range next {
				ws[sh] = ShareWrite{Name: limiter.ShardName(name, sh), Expected: g[sh].Version, State: st}
			}
			shards = len(next)
			return ws, StepWrite, nil
		},
		// A turn's remembered state of a shard is then older than the
		// stored one: its next write fails the version condition and reads.
		func(ctx context.Context, ws []ShareWrite) error { return s.WriteShares(ctx, ws) },
	)
	if err != nil {
		return 0, fmt.Errorf("set limit of group %s: %w", name, err)
	}
	return shards, nil
}

// recordsLimit reports whether every shard of g records limit as the
// group's (limiter.State.Group), which entries trust: shards stored
// before they kept it are re-shared once, which records it.
func recordsLimit(g []limiter.State, limit int) bool {
	for _, st := range g {
		if len(g) > 1 && st.Group != limit {
			return false
		}
	}
	return true
}

// Rebalance moves units of share, one a write, from shards with idle room
// (room and no unpaused run waiting) to shards that are short (an
// unpaused run waiting and no room), each in one write conditioned on
// both shards' versions (limiter.Borrow), and hands on each short shard's
// new room; it answers the runs admitted, by shard. It ends when no shard
// can lend or none is short. Entries that wait and hand-offs that find
// their shard's queue empty call it; the ticker calls it to repair a
// borrow lost in a crash. A group of one has nothing to move.
func (t *Turns) Rebalance(ctx context.Context, s Limiters, name string, now time.Time) (map[string][]Admitted, error) {
	got := map[string][]Admitted{}
	type pair struct {
		from, to int
		group    []limiter.State
	}
	var toName string
	err := Update(ctx, limiterRounds(),
		func(ctx context.Context, _ int) (pair, error) {
			from, to, group, err := borrowPair(ctx, s, name)
			return pair{from, to, group}, err
		},
		func(_ context.Context, p pair) ([]ShareWrite, Step, error) {
			if p.from < 0 {
				return nil, StepDone, nil
			}
			f, tt := limiter.Borrow(p.group[p.from], p.group[p.to])
			toName = limiter.ShardName(name, p.to)
			// Each borrow that lands is followed by another round: the
			// loop ends when no shard can lend or none is short.
			return []ShareWrite{
				{Name: limiter.ShardName(name, p.from), Expected: p.group[p.from].Version, State: f},
				{Name: toName, Expected: p.group[p.to].Version, State: tt},
			}, StepWriteMore, nil
		},
		func(ctx context.Context, ws []ShareWrite) error {
			if err := s.WriteShares(ctx, ws); err != nil {
				return err
			}
			// The short shard's new room is handed on at once.
			admitted, err := t.AdmitNext(ctx, s, toName, limiter.Rate{}, now)
			got[toName] = append(got[toName], admitted...)
			return err
		},
	)
	if err != nil {
		return got, fmt.Errorf("rebalance group %s: %w", name, err)
	}
	return got, nil
}

// borrowPair reads a group and picks a shard that can lend and one that is
// short (-1, -1: none). A shard's queue head is read only when it has runs
// waiting: a group nobody waits in costs one GetItem a shard.
func borrowPair(ctx context.Context, s Limiters, name string) (int, int, []limiter.State, error) {
	group, err := Group(ctx, s, name)
	if err != nil || len(group) < 2 {
		return -1, -1, group, err
	}
	from, to := -1, -1
	for sh, st := range group {
		heads := false
		if st.Waiting > 0 {
			ws, err := firstUnpaused(ctx, s, limiter.ShardName(name, sh), st.Waiting, 1)
			if err != nil {
				return -1, -1, nil, err
			}
			heads = len(ws) > 0
		}
		if from < 0 && st.CanLend(heads) {
			from = sh
		}
		if to < 0 && st.Short(heads) {
			to = sh
		}
	}
	if from < 0 || to < 0 {
		return -1, -1, group, nil
	}
	return from, to, group, nil
}
