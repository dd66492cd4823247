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

func (s *Store) limiter(name string) *limiterRec {
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
func (s *Store) GetLimiter(_ context.Context, name string) (limiter.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.limiter(name).state
	st.Admits = slices.Clone(st.Admits)
	return st, nil
}

// ListWaiting implements ledger.Limiters.
func (s *Store) ListWaiting(_ context.Context, name string, limit int) ([]ledger.Waiting, error) {
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
func (s *Store) ListAdmitted(_ context.Context, name string) ([]ledger.Admitted, error) {
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
func (s *Store) FindRun(_ context.Context, name string, p limiter.Place) (*ledger.Admitted, *ledger.Waiting, error) {
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
func (s *Store) WriteLimiter(_ context.Context, w ledger.LimiterWrite) error {
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
	if p := w.PutWaiting; p != nil {
		if _, there := l.waiting[p.SortKey()]; there != w.Replace {
			return conflict
		}
	}
	if p := w.DeleteWaiting; p != nil {
		if _, there := l.waiting[p.SortKey()]; !there {
			return conflict
		}
	}
	if a := w.PutAdmitted; a != nil {
		if _, there := l.admitted[a.RunID]; there {
			return conflict
		}
	}
	if id := w.DeleteAdmitted; id != "" {
		if _, there := l.admitted[id]; !there {
			return conflict
		}
	}
	if p := w.AbsentWaiting; p != nil {
		if _, there := l.waiting[p.SortKey()]; there {
			return conflict
		}
	}
	if id := w.AbsentAdmitted; id != "" {
		if _, there := l.admitted[id]; there {
			return conflict
		}
	}
	if id := w.LiveRun; id != "" {
		if run, ok := s.runs[id]; !ok || run.ExecutionState.Terminal() {
			return fmt.Errorf("write limiter %s: run %s: %w", w.Name, id, ledger.ErrConflict)
		}
	}
	l.state = w.State
	l.state.Admits = slices.Clone(w.State.Admits)
	if p := w.DeleteWaiting; p != nil {
		delete(l.waiting, p.SortKey())
	}
	if p := w.PutWaiting; p != nil {
		l.waiting[p.SortKey()] = *p
	}
	if id := w.DeleteAdmitted; id != "" {
		delete(l.admitted, id)
	}
	if a := w.PutAdmitted; a != nil {
		l.admitted[a.RunID] = *a
	}
	return nil
}
