package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/ledger"
)

// CreateBackfill writes a new backfill, as the DynamoDB store does.
func (s *backfills) CreateBackfill(ctx context.Context, b ledger.Backfill) (ledger.Backfill, error) {
	op := opError("create backfill %s of job %s", b.ID, b.Job)
	if err := ledger.CheckNewBackfill(b); err != nil {
		return ledger.Backfill{}, op(err)
	}
	if err := tooLarge("backfill "+b.ID, len(b.Params)+len(b.Pending)*32, ledger.MaxItemSize); err != nil {
		return ledger.Backfill{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Backfill{}, op(err)
	}
	defer s.mu.Unlock()
	if _, ok := s.backfills[b.ID]; ok {
		return ledger.Backfill{}, op(fmt.Errorf("%w: backfill %s", ledger.ErrAlreadyExists, b.ID))
	}
	timer := b.TimerAt
	b.Version = 0
	b = ledger.NextBackfill(b, s.clock(), s.backstop)
	if b.Unfinished() && !timer.IsZero() {
		b.TimerAt = timer
	}
	if b.CreatedAt.IsZero() {
		b.CreatedAt = s.clock()
	}
	s.backfills[b.ID] = cloneBackfill(b)
	return cloneBackfill(b), nil
}

// GetBackfill reads a backfill.
func (s *backfills) GetBackfill(ctx context.Context, id string) (ledger.Backfill, error) {
	op := opError("get backfill %s", id)
	if err := s.enter(ctx, ledger.CheckBackfillID(id)); err != nil {
		return ledger.Backfill{}, op(err)
	}
	defer s.mu.Unlock()
	b, ok := s.backfills[id]
	if !ok {
		return ledger.Backfill{}, op(ledger.ErrNotFound)
	}
	return cloneBackfill(b), nil
}

// ListBackfills lists a job's backfills newest first.
func (s *backfills) ListBackfills(ctx context.Context, job string, limit int, token string) ([]ledger.Backfill, string, error) {
	op := opError("list backfills of job %s", job)
	if err := ledger.CheckJobName(job); err != nil {
		return nil, "", op(err)
	}
	listing := "backfills of job " + job
	after, err := decodeToken(token, listing)
	if err != nil {
		return nil, "", op(err)
	}
	if err := s.begin(ctx); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	var list []ledger.Backfill
	for _, b := range s.backfills {
		if b.Job == job {
			list = append(list, b)
		}
	}
	slices.SortFunc(list, func(a, b ledger.Backfill) int { return strings.Compare(b.ID, a.ID) })
	got, next := page(list, func(b ledger.Backfill) string { return b.ID }, descending, listing, after, listLimit(limit))
	out := make([]ledger.Backfill, len(got))
	for i, b := range got {
		out[i] = cloneBackfill(b)
	}
	return out, next, nil
}

// UpdateBackfill stores what b holds with a compare-and-set on b.Version.
func (s *backfills) UpdateBackfill(ctx context.Context, b ledger.Backfill) (ledger.Backfill, error) {
	op := opError("update backfill %s from version %d", b.ID, b.Version)
	if err := ledger.CheckBackfillID(b.ID); err != nil {
		return ledger.Backfill{}, op(err)
	}
	if err := ledger.CheckBackfillCounts(b); err != nil {
		return ledger.Backfill{}, op(err)
	}
	if err := s.begin(ctx); err != nil {
		return ledger.Backfill{}, op(err)
	}
	defer s.mu.Unlock()
	cur, ok := s.backfills[b.ID]
	switch {
	case !ok:
		return ledger.Backfill{}, op(ledger.ErrNotFound)
	case cur.Version != b.Version:
		return ledger.Backfill{}, op(ledger.ErrVersionConflict)
	}
	next := ledger.NextBackfill(b, s.clock(), s.backstop)
	// The range, job and params never change.
	next.Job, next.From, next.To, next.MaxActive, next.Params = cur.Job, cur.From, cur.To, cur.MaxActive, cur.Params
	next.Slots, next.CreatedAt = cur.Slots, cur.CreatedAt
	s.backfills[b.ID] = cloneBackfill(next)
	return cloneBackfill(next), nil
}

// TakenSlots reports which of a job's slots hold a run.
func (s *backfills) TakenSlots(ctx context.Context, job string, slots []time.Time) ([]bool, error) {
	op := opError("read %d slots of job %s", len(slots), job)
	if err := s.enter(ctx, ledger.CheckJobName(job)); err != nil {
		return nil, op(err)
	}
	defer s.mu.Unlock()
	out := make([]bool, len(slots))
	for i, t := range slots {
		_, out[i] = s.slots[slotKey(job, t)]
	}
	return out, nil
}

func slotKey(job string, t time.Time) claimKey {
	return claimKey{job, t.UTC().Format(time.RFC3339Nano)}
}

func cloneBackfill(b ledger.Backfill) ledger.Backfill {
	b.Params = slices.Clone(b.Params)
	b.Pending = slices.Clone(b.Pending)
	b.Active = slices.Clone(b.Active)
	return b
}
