package memstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// ListDueTimers lists the timers of shard due at now, oldest first, at most
// limit (0: store.DefaultListLimit) per page. Jobs with a next fire that
// are not paused, live runs' backstops and instances that wait on a time
// have a timer; an item keeps its shard for life.
func (s *Store) ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]store.DueTimer, string, error) {
	op := opError("list due timers of shard %d at %s", shard, now)
	if shard < 0 || shard >= tableschema.TimerShards {
		return nil, "", op(fmt.Errorf("%w: shard %d outside 0..%d", store.ErrInvalidInput, shard, tableschema.TimerShards-1))
	}
	listing := tableschema.ShardName(shard)
	after, err := decodeToken(token, listing)
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	var due []store.DueTimer
	add := func(d store.DueTimer) {
		if !d.At.IsZero() && !d.At.After(now) && shardOf(d) == shard {
			due = append(due, d)
		}
	}
	for _, j := range s.jobs {
		add(store.DueTimer{Item: store.TimerOfJob, Job: j.Name, At: j.TimerAt(), Kind: store.TimerKindJobFire})
	}
	for _, r := range s.runs {
		if !r.ExecutionState.Terminal() {
			add(store.DueTimer{Item: store.TimerOfRun, Job: r.Job, Run: r.ID, At: r.TimerAt, Kind: store.TimerKindRunBackstop})
		}
	}
	for _, b := range s.backfills {
		add(store.DueTimer{Item: store.TimerOfBackfill, Job: b.Job, Backfill: b.ID, At: b.TimerAt, Kind: store.TimerKindBackfill})
	}
	for key, in := range s.instances {
		if at, kind := timerOf(in.inst.Snapshot); kind != statemodel.TimerNone {
			add(store.DueTimer{Item: store.TimerOfInstance, Job: in.inst.Job, Run: key.Run, Task: key.Task, At: at, Kind: string(kind)})
		}
	}
	order := func(d store.DueTimer) string {
		return d.At.UTC().Format("2006-01-02T15:04:05.000000000Z") + "\x00" + itemKey(d)
	}
	slices.SortFunc(due, func(a, b store.DueTimer) int { return strings.Compare(order(a), order(b)) })
	got, next := page(due, order, ascending, listing, after, listLimit(limit))
	return slices.Clone(got), next, nil
}

// itemKey names the item a timer belongs to.
func itemKey(d store.DueTimer) string {
	switch d.Item {
	case store.TimerOfJob:
		return "job\x00" + d.Job
	case store.TimerOfRun:
		return "run\x00" + d.Run
	case store.TimerOfBackfill:
		return "backfill\x00" + d.Backfill
	}
	return "instance\x00" + d.Run + "\x00" + d.Task
}

// shardOf spreads items over the shards by a stable hash of the item.
func shardOf(d store.DueTimer) int {
	sum := sha256.Sum256([]byte(itemKey(d)))
	return int(binary.BigEndian.Uint32(sum[:4]) % tableschema.TimerShards)
}
