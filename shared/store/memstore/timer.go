package memstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// ListDueTimers lists the timers of shard due at now, oldest first, at most
// limit (0: ledger.DefaultListLimit) per page. Jobs with a next fire that
// are not paused, live runs' backstops and instances that wait on a time
// have a timer; an item keeps its shard for life.
func (s *timers) ListDueTimers(ctx context.Context, shard int, now time.Time, limit int, token string) ([]ledger.DueTimer, string, error) {
	op := opError("list due timers of shard %d at %s", shard, now)
	if shard < 0 || shard >= tableschema.TimerShards {
		return nil, "", op(fmt.Errorf("%w: shard %d outside 0..%d", ledger.ErrInvalidInput, shard, tableschema.TimerShards-1))
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
	var due []ledger.DueTimer
	add := func(d ledger.DueTimer) {
		if !d.At.IsZero() && !d.At.After(now) && shardOf(d) == shard {
			due = append(due, d)
		}
	}
	for _, j := range s.jobs {
		add(ledger.DueTimer{Item: ledger.TimerOfJob, Job: j.Name, At: j.TimerAt(), Kind: ledger.TimerKindJobFire})
	}
	for _, r := range s.runs {
		if !r.ExecutionState.Terminal() {
			add(ledger.DueTimer{Item: ledger.TimerOfRun, Job: r.Job, Run: r.ID, At: r.TimerAt, Kind: ledger.TimerKindRunBackstop})
		}
	}
	for _, b := range s.backfills {
		add(ledger.DueTimer{Item: ledger.TimerOfBackfill, Job: b.Job, Backfill: b.ID, At: b.TimerAt, Kind: ledger.TimerKindBackfill})
	}
	for key, in := range s.instances {
		if at, kind := in.inst.TimerAt, in.inst.TimerKind; kind != statemodel.TimerNone && !at.IsZero() {
			add(ledger.DueTimer{Item: ledger.TimerOfInstance, Job: in.inst.Job, Run: key.Run, Task: key.Task, At: at, Kind: string(kind)})
		}
	}
	order := func(d ledger.DueTimer) string {
		return d.At.UTC().Format("2006-01-02T15:04:05.000000000Z") + "\x00" + itemKey(d)
	}
	slices.SortFunc(due, func(a, b ledger.DueTimer) int { return strings.Compare(order(a), order(b)) })
	got, next := page(due, order, ascending, listing, after, listLimit(limit))
	return slices.Clone(got), next, nil
}

// itemKey names the item a timer belongs to.
func itemKey(d ledger.DueTimer) string {
	switch d.Item {
	case ledger.TimerOfJob:
		return "job\x00" + d.Job
	case ledger.TimerOfRun:
		return "run\x00" + d.Run
	case ledger.TimerOfBackfill:
		return "backfill\x00" + d.Backfill
	}
	return "instance\x00" + d.Run + "\x00" + d.Task
}

// shardOf spreads items over the shards by a stable hash of the item.
func shardOf(d ledger.DueTimer) int {
	sum := sha256.Sum256([]byte(itemKey(d)))
	return int(binary.BigEndian.Uint32(sum[:4]) % tableschema.TimerShards)
}
