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
// then the others. A limiter stored before groups is a group of one.
func Group(ctx context.Context, s Limiters, name string) ([]limiter.State, error) {
	first, err := s.GetLimiter(ctx, name)
	if err != nil {
		return nil, err
	}
	out := []limiter.State{first}
	for sh := 1; sh < first.GroupShards(); sh++ {
		st, err := s.GetLimiter(ctx, limiter.ShardName(name, sh))
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
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
// limiter (EnterLimiter). Otherwise the group is made or re-shared when
// its shards or limit differ (SetGroupLimit), and the holder tries its
// home shard and then the others (each admits it only when nobody waits
// there and it has room), and else waits in its home shard, which then
// borrows a unit of share from a shard with idle room (Rebalance).
func (t *Turns) EnterGroup(ctx context.Context, s Limiters, e Entry, now time.Time) (GroupEntered, error) {
	first, err := s.GetLimiter(ctx, e.Limiter)
	if err != nil {
		return GroupEntered{}, err
	}
	if first.GroupShards() == 1 && e.Limit <= limiter.ShardLimit {
		en, err := t.EnterLimiter(ctx, s, e, now)
		return GroupEntered{Entered: en, Shard: e.Limiter}, err
	}
	if e.Rate.On() {
		return GroupEntered{}, fmt.Errorf("%w: limiter %s: a rate window is not sharded", ErrInvalidInput, e.Limiter)
	}
	shards, err := t.SetGroupLimit(ctx, s, e.Limiter, e.Limit)
	if err != nil {
		return GroupEntered{}, err
	}
	home := limiter.Home(e.Place.RunID, shards)
	for _, sh := range limiter.Order(home, shards) {
		try := e
		try.Limiter, try.Share, try.AdmitOnly = limiter.ShardName(e.Limiter, sh), true, true
		en, err := t.EnterLimiter(ctx, s, try, now)
		if err != nil {
			return GroupEntered{}, err
		}
		if en.Admitted || en.Found {
			return GroupEntered{Entered: en, Shard: try.Limiter}, nil
		}
	}
	stay := e
	stay.Limiter, stay.Share = limiter.ShardName(e.Limiter, home), true
	en, err := t.EnterLimiter(ctx, s, stay, now)
	if err != nil || en.Admitted {
		return GroupEntered{Entered: en, Shard: stay.Limiter}, err
	}
	got, err := t.Rebalance(ctx, s, e.Limiter, now)
	return GroupEntered{Entered: en, Shard: stay.Limiter, Borrowed: got}, err
}

// SetGroupLimit stores a group's limit: when its shards' shares do not
// sum to limit, or it needs more shards than it has, the shards are
// re-shared (limiter.Reshare) in one write conditioned on every version
// read, and the shards' count is answered. A group never loses shards
// (each may hold runs); a lowered limit stops nothing already active. The
// caller then hands on each shard's room (AdmitNext) and Rebalances.
func (t *Turns) SetGroupLimit(ctx context.Context, s Limiters, name string, limit int) (int, error) {
	for range limiterRetries {
		group, err := Group(ctx, s, name)
		if err != nil {
			return 0, err
		}
		sum, _, _ := GroupCounts(group)
		if sum == limit && len(group) >= limiter.Shards(limit) && group[0].Version != 0 {
			return len(group), nil
		}
		if len(group) < limiter.Shards(limit) {
			// New shards beyond shard 0's count are not stored yet, or
			// were stored by a re-share that lost: read them to write on
			// their versions.
			for sh := len(group); sh < limiter.Shards(limit); sh++ {
				st, err := s.GetLimiter(ctx, limiter.ShardName(name, sh))
				if err != nil {
					return 0, err
				}
				group = append(group, st)
			}
		}
		next := limiter.Reshare(group, limit)
		ws := make([]ShareWrite, len(next))
		for sh, st := range next {
			ws[sh] = ShareWrite{Name: limiter.ShardName(name, sh), Expected: group[sh].Version, State: st}
		}
		err = s.WriteShares(ctx, ws)
		if err == nil {
			// A turn's remembered state of a shard is now older than
			// the stored one: its next write fails the version
			// condition and reads.
			return len(next), nil
		}
		if !errors.Is(err, ErrVersionConflict) {
			return 0, err
		}
		if err := conflictPause(ctx, 2); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("set limit of group %s: %w", name, ErrUnsettled)
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
	for range limiterRetries {
		from, to, group, err := borrowPair(ctx, s, name)
		if err != nil || from < 0 {
			return got, err
		}
		f, tt := limiter.Borrow(group[from], group[to])
		fromName, toName := limiter.ShardName(name, from), limiter.ShardName(name, to)
		err = s.WriteShares(ctx, []ShareWrite{
			{Name: fromName, Expected: group[from].Version, State: f},
			{Name: toName, Expected: group[to].Version, State: tt},
		})
		switch {
		case errors.Is(err, ErrVersionConflict):
			if err := conflictPause(ctx, 2); err != nil {
				return got, err
			}
			continue
		case err != nil:
			return got, err
		}
		admitted, err := t.AdmitNext(ctx, s, toName, limiter.Rate{}, now)
		got[toName] = append(got[toName], admitted...)
		if err != nil {
			return got, err
		}
	}
	return got, fmt.Errorf("rebalance group %s: %w", name, ErrUnsettled)
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
