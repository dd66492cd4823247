package memstore

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel/limiter"
)

// limiterRec is a limiter's items: its limiter item, its waiting items by
// sort key (limiter.Place.SortKey) and its admitted items by run id.
type limiterRec struct {
	state    limiter.State
	waiting  map[string]ledger.Waiting
	admitted map[string]ledger.Admitted
}

func (s *limiters) limiter(name string) *limiterRec {
	if s.limiters == nil {
		s.limiters = map[string]*limiterRec{}
	}
	l := s.limiters[name]
	if l == nil {
		l = &limiterRec{waiting: map[string]ledger.Waiting{}, admitted: map[string]ledger.Admitted{}}
		s.limiters[name] = l
	}
	return l
}

// GetLimiter implements ledger.Limiters.
func (s *limiters) GetLimiter(_ context.Context, name string) (limiter.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.limiter(name).state
	st.Admits = slices.Clone(st.Admits)
	return st, nil
}

// GetLimiters implements ledger.Limiters: the limiters read at one
// moment, in the order of names.
func (s *limiters) GetLimiters(_ context.Context, names []string) ([]limiter.State, error) {
	for _, name := range names {
		if err := ledger.CheckLimiterName(name); err != nil {
			return nil, fmt.Errorf("get limiters: %w", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]limiter.State, len(names))
	for i, name := range names {
		out[i] = s.limiter(name).state
		out[i].Admits = slices.Clone(out[i].Admits)
	}
	return out, nil
}

// ListWaiting implements ledger.Limiters.
func (s *limiters) ListWaiting(_ context.Context, name string, limit int) ([]ledger.Waiting, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiter(name)
	keys := slices.Sorted(maps.Keys(l.waiting))
	var out []ledger.Waiting
	for _, k := range keys {
		if len(out) >= limit {
			break
		}
		out = append(out, l.waiting[k])
	}
	return out, nil
}

// ListAdmitted implements ledger.Limiters.
func (s *limiters) ListAdmitted(_ context.Context, name string) ([]ledger.Admitted, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiter(name)
	var out []ledger.Admitted
	for _, k := range slices.Sorted(maps.Keys(l.admitted)) {
		out = append(out, l.admitted[k])
	}
	return out, nil
}

// FindRun implements ledger.Limiters.
func (s *limiters) FindRun(_ context.Context, name string, p limiter.Place) (*ledger.Admitted, *ledger.Waiting, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiter(name)
	var a *ledger.Admitted
	var w *ledger.Waiting
	if x, ok := l.admitted[p.RunID]; ok {
		a = &x
	}
	if x, ok := l.waiting[p.SortKey()]; ok {
		w = &x
	}
	return a, w, nil
}

// WriteLimiter implements ledger.Limiters: every condition is checked
// before anything changes, as one transaction.
func (s *limiters) WriteLimiter(_ context.Context, w ledger.LimiterWrite) error {
	if err := ledger.CheckLimiterName(w.Name); err != nil {
		return fmt.Errorf("write limiter: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limiter(w.Name)
	conflict := fmt.Errorf("write limiter %s: %w", w.Name, ledger.ErrVersionConflict)
	if l.state.Version != w.Expected {
		return conflict
	}
	all := append([]ledger.LimiterWrite{w}, w.Also...)
	if limiterWriteRepeats(all) {
		// DynamoDB refuses a transaction that names one item twice.
		return fmt.Errorf("write limiter %s: a run's items twice in one write: %w", w.Name, ledger.ErrInvalidInput)
	}
	for _, c := range all {
		if p := c.PutWaiting; p != nil {
			if _, there := l.waiting[p.SortKey()]; there != c.Replace {
				return conflict
			}
		}
		if p := c.DeleteWaiting; p != nil {
			if _, there := l.waiting[p.SortKey()]; !there {
				return conflict
			}
		}
		if a := c.PutAdmitted; a != nil {
			if _, there := l.admitted[a.RunID]; there {
				return conflict
			}
		}
		if id := c.DeleteAdmitted; id != "" {
			if _, there := l.admitted[id]; !there {
				return conflict
			}
		}
		if p := c.AbsentWaiting; p != nil {
			if _, there := l.waiting[p.SortKey()]; there {
				return conflict
			}
		}
		if id := c.AbsentAdmitted; id != "" {
			if _, there := l.admitted[id]; there {
				return conflict
			}
		}
		if id := c.LiveRun; id != "" {
			if c.Mark != nil && c.Mark.RunID != id {
				return fmt.Errorf("write limiter %s: a write marks run %s and checks run %s: %w", w.Name, c.Mark.RunID, id, ledger.ErrInvalidInput)
			}
			if run, ok := s.runs[id]; !ok || run.ExecutionState.Terminal() {
				return fmt.Errorf("write limiter %s: run %s: %w", w.Name, id, ledger.ErrConflict)
			}
		}
		if m := c.Mark; m != nil {
			if _, ok := s.runs[m.RunID]; !ok {
				return conflict
			}
		}
	}
	l.state = w.State
	l.state.Admits = slices.Clone(w.State.Admits)
	for _, c := range all {
		if p := c.DeleteWaiting; p != nil {
			delete(l.waiting, p.SortKey())
		}
		if p := c.PutWaiting; p != nil {
			l.waiting[p.SortKey()] = *p
		}
		if id := c.DeleteAdmitted; id != "" {
			delete(l.admitted, id)
		}
		if a := c.PutAdmitted; a != nil {
			l.admitted[a.RunID] = *a
		}
		if m := c.Mark; m != nil {
			run := s.runs[m.RunID]
			run.WaitingIn = w.Name
			if !m.At.IsZero() {
				run.AdmittedAt, run.AdmittedIn, run.WaitingIn = m.At, w.Name, ""
			}
			s.runs[m.RunID] = run
		}
	}
	return nil
}

// WriteShares implements ledger.Limiters: every version is checked before
// anything changes, as one transaction.
func (s *limiters) WriteShares(_ context.Context, ws []ledger.ShareWrite) error {
	if err := ledger.CheckShareWrite(ws); err != nil {
		return fmt.Errorf("write shares: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range ws {
		if s.limiter(w.Name).state.Version != w.Expected {
			return fmt.Errorf("write shares of %s: %w", w.Name, ledger.ErrVersionConflict)
		}
	}
	for _, w := range ws {
		l := s.limiter(w.Name)
		l.state = w.State
		l.state.Admits = slices.Clone(w.State.Admits)
	}
	return nil
}

// limiterWriteRepeats reports whether a write's item changes name one
// run's item twice.
func limiterWriteRepeats(all []ledger.LimiterWrite) bool {
	seen := map[string]bool{}
	twice := false
	note := func(k string) {
		twice = twice || seen[k]
		seen[k] = true
	}
	for _, c := range all {
		places := []*limiter.Place{c.DeleteWaiting, c.AbsentWaiting}
		if c.PutWaiting != nil {
			places = append(places, &c.PutWaiting.Place)
		}
		for _, p := range places {
			if p != nil {
				note("w" + p.SortKey())
			}
		}
		admitted := []string{c.DeleteAdmitted, c.AbsentAdmitted}
		if c.PutAdmitted != nil {
			admitted = append(admitted, c.PutAdmitted.RunID)
		}
		for _, id := range admitted {
			if id != "" {
				note("a" + id)
			}
		}
		switch {
		case c.LiveRun != "":
			note("r" + c.LiveRun)
		case c.Mark != nil:
			note("r" + c.Mark.RunID)
		}
	}
	return twice
}
