package memstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// memMap is a map task's item and its elements.
type memMap struct {
	state  ledger.MapState
	items  [][]byte
	output *memMapOutput
}

// CreateMap writes a map's item with its elements, once.
func (s *mapStates) CreateMap(ctx context.Context, m ledger.MapState, items [][]byte) error {
	op := opError("create map %s/%s", m.Run, m.Task)
	if err := s.enter(ctx, ledger.CheckMapKey(m.Run, m.Task)); err != nil {
		return op(err)
	}
	defer s.mu.Unlock()
	key := ledger.InstanceKey{Run: m.Run, Task: m.Task}
	if s.maps == nil {
		s.maps = map[ledger.InstanceKey]*memMap{}
	}
	if _, ok := s.maps[key]; ok {
		return op(ledger.ErrConflict)
	}
	cp := make([][]byte, len(items))
	for i, it := range items {
		cp[i] = slices.Clone(it)
	}
	s.maps[key] = &memMap{state: m, items: cp}
	return nil
}

func (s *mem) mapOf(run, task string) (*memMap, bool) {
	m, ok := s.maps[ledger.InstanceKey{Run: run, Task: task}]
	return m, ok
}

// GetMap reads a map's item.
func (s *mapStates) GetMap(ctx context.Context, run, task string) (ledger.MapState, error) {
	op := opError("get map %s/%s", run, task)
	if err := s.enter(ctx, ledger.CheckMapKey(run, task)); err != nil {
		return ledger.MapState{}, op(err)
	}
	defer s.mu.Unlock()
	m, ok := s.mapOf(run, task)
	if !ok {
		return ledger.MapState{}, op(ledger.ErrNotFound)
	}
	return m.state, nil
}

// MapItems reads chunk c of a map's elements.
func (s *mapStates) MapItems(ctx context.Context, run, task string, c int) ([][]byte, error) {
	op := opError("map items %s/%s#%d", run, task, c)
	if err := s.enter(ctx, ledger.CheckMapKey(run, task)); err != nil {
		return nil, op(err)
	}
	defer s.mu.Unlock()
	m, ok := s.mapOf(run, task)
	from := c * ledger.MapItemsPerChunk
	if !ok || c < 0 || from >= len(m.items) {
		return nil, op(ledger.ErrNotFound)
	}
	out := m.items[from:min(len(m.items), from+ledger.MapItemsPerChunk)]
	cp := make([][]byte, len(out))
	for i, it := range out {
		cp[i] = slices.Clone(it)
	}
	return cp, nil
}

// ReleaseChildren moves Next and Running on, conditioned as the DynamoDB
// store's write.
func (s *mapStates) ReleaseChildren(ctx context.Context, m ledger.MapState, k int) (ledger.MapState, error) {
	if err := s.enter(ctx, ledger.CheckMapKey(m.Run, m.Task)); err != nil {
		return m, err
	}
	defer s.mu.Unlock()
	if err := ledger.CheckMapRelease(m, k); err != nil {
		return m, err
	}
	cur, ok := s.mapOf(m.Run, m.Task)
	if !ok {
		return m, ledger.ErrNotFound
	}
	if cur.state.Next != m.Next {
		m.Next = cur.state.Next
		return m, ledger.ErrVersionConflict
	}
	cur.state.Next += k
	cur.state.Running += k
	return cur.state, nil
}

// CreateChildren writes children's instances; existing ones stay.
func (s *mapStates) CreateChildren(ctx context.Context, insts []ledger.Instance) error {
	if err := s.enter(ctx, nil); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, inst := range insts {
		if err := ledger.CheckInstanceKey(inst.Key); err != nil {
			return err
		}
		if _, ok := s.instances[inst.Key]; ok {
			continue
		}
		inst = cloneInstance(inst)
		hist := inst.History
		inst.History = nil
		in := &instance{inst: inst, guards: map[string]statemodel.SeenEvent{}, attempts: map[int]*ledger.Attempt{}}
		for _, tr := range hist {
			in.history = append(in.history, cloneTransition(tr))
			in.guards[tr.EventID] = statemodel.SeenEvent{ID: tr.EventID, Seq: tr.Seq, To: tr.To}
		}
		s.instances[inst.Key] = in
	}
	return nil
}

// ListChildren pages a map's children in index order.
func (s *mapStates) ListChildren(ctx context.Context, run, task string, limit int, token string) ([]ledger.Instance, string, error) {
	op := opError("list children of %s/%s", run, task)
	if err := s.enter(ctx, ledger.CheckMapKey(run, task)); err != nil {
		return nil, "", op(err)
	}
	defer s.mu.Unlock()
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	from := 0
	if token != "" {
		n, err := strconv.Atoi(token)
		if err != nil || n < 0 {
			return nil, "", op(ledger.ErrInvalidPageToken)
		}
		from = n
	}
	m, ok := s.mapOf(run, task)
	if !ok {
		return []ledger.Instance{}, "", nil
	}
	var out []ledger.Instance
	for i := from; i < m.state.Total; i++ {
		if len(out) == limit {
			return out, strconv.Itoa(i), nil
		}
		if in, ok := s.instances[ledger.InstanceKey{Run: run, Task: ledger.ChildTask(task, i)}]; ok {
			out = append(out, cloneInstance(in.inst))
		}
	}
	return out, "", nil
}

// addChildEnd adds a child's count change to its map's counts (under the
// store's lock, with the child's write).
func (s *mem) addChildEnd(key ledger.InstanceKey, change map[string]int) error {
	parent, _, _ := ledger.ParseChild(key.Task)
	m, ok := s.mapOf(key.Run, parent)
	if !ok {
		return fmt.Errorf("child %s: %w: its map item is missing", key, ledger.ErrNotFound)
	}
	m.state.Running += change["running"]
	m.state.Succeeded += change["succeeded"]
	m.state.Failed += change["failed"]
	m.state.Cancelled += change["cancelled"]
	return nil
}

type memMapOutput struct {
	out       []byte
	truncated bool
}

// SetMapOutput keeps a map's output.
func (s *mapStates) SetMapOutput(ctx context.Context, run, task string, out []byte, truncated bool) error {
	if err := s.enter(ctx, ledger.CheckMapKey(run, task)); err != nil {
		return err
	}
	defer s.mu.Unlock()
	m, ok := s.mapOf(run, task)
	if !ok {
		return ledger.ErrNotFound
	}
	m.output = &memMapOutput{out: slices.Clone(out), truncated: truncated}
	return nil
}

// GetMapOutput reads a map's output.
func (s *mapStates) GetMapOutput(ctx context.Context, run, task string) ([]byte, bool, error) {
	if err := s.enter(ctx, ledger.CheckMapKey(run, task)); err != nil {
		return nil, false, err
	}
	defer s.mu.Unlock()
	m, ok := s.mapOf(run, task)
	if !ok || m.output == nil {
		return nil, false, ledger.ErrNotFound
	}
	return slices.Clone(m.output.out), m.output.truncated, nil
}

// CloseMap counts a map's pending children cancelled, conditioned as the
// DynamoDB store's write.
func (s *mapStates) CloseMap(ctx context.Context, m ledger.MapState) (ledger.MapState, error) {
	if err := s.enter(ctx, ledger.CheckMapKey(m.Run, m.Task)); err != nil {
		return m, err
	}
	defer s.mu.Unlock()
	cur, ok := s.mapOf(m.Run, m.Task)
	if !ok {
		return m, ledger.ErrNotFound
	}
	if cur.state.Next != m.Next {
		return m, ledger.ErrVersionConflict
	}
	cur.state.Cancelled += cur.state.Total - cur.state.Next
	cur.state.Next = cur.state.Total
	return cur.state, nil
}
