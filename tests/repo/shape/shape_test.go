package shape

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A small module with one of each thing the figures count: the measure
// finds each, and leaves out what is not one.
func TestMeasureCountsEachFigure(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("shared/scheduler/a.go", `package scheduler
import ("errors"; "sync"; "example/jobspec")
var ErrGone = errors.New("gone")
var table = map[string]int{"a": 1}
var counts = map[string]int{}
var mu sync.Mutex
type Service struct{}
func (s *Service) One() { _ = table["a"]; counts["x"]++; two(); _ = jobspec.Load(nil) }
func (s *Service) Two() {}
func (s *Service) Three() {}
`)
	write("shared/scheduler/b.go", `package scheduler
func two() { var s Service; s.One() }
func loop(st store) {
	for try := range maxRetries { v := st.GetX(); st.WriteX(v) }
	for try := 0; try < maxRetries; try++ { st.WriteX(1) }
	for i := range 3 { v := st.GetX(); st.WriteX(v) }
}
`)
	write("shared/scheduler/c.go", `package scheduler
func leaf() {}
`)
	// A loop over a round whose bound the body checks is one, and so is
	// one whose reads and writes are unexported; a test's case that races
	// writers is not.
	write("shared/scheduler/d.go", `package scheduler
import "testing"
func retry(st store) {
	for round := 0; ; round++ { v := st.GetX(); if st.CloseX(v) == nil || round > 3 { return } }
}
func lower(st store) {
	for try := range maxTries { v := st.getX(); st.deleteX(v) }
}
func raceCase(t *testing.T, st store) {
	for round := range 5 { st.WriteX(st.GetX()) }
}
`)
	write("shared/scheduler/room/r.go", `package room
import "example/jobspec"
func load() { _, _ = jobspec.Load(nil) }
`)
	// The one generic loop is counted; a caller that passes it its read,
	// decision and write has no loop of its own.
	write("shared/ledger/update.go", `package ledger
func Update[T, W any](rounds Rounds, read func(int) T, decide func(T) W, write func(W) error) error {
	for round, missed := 0, 0; missed < rounds.Max; round++ { if write(decide(read(round))) == nil { return nil }; missed++ }
	return nil
}
func caller(st store) error {
	return Update(Rounds{Max: 3}, func(int) int { return st.GetX() }, func(v int) int { return v + 1 }, func(v int) error { return st.WriteX(v) })
}
`)
	write("shared/scheduler/a_test.go", `package scheduler
var testOnly = 1
func init() { testOnly++ }
`)
	write("statemodel/t.go", `package statemodel
var index = map[string]int{}
func init() { index["a"] = 1 }
`)
	write("shared/scheduler/maps/m.go", `package maps
import ("example/shared/scheduler/flow"; "example/shared/api"; "example/shared/ledger")
var _ = flow.X
`)
	write("shared/scheduler/flow/f.go", `package flow
import "example/shared/ledger"
const X = 1
`)
	write("shared/api/api.go", `package api
import "example/shared/scheduler"
`)
	write("shared/ledger/l.go", `package ledger
`)
	f, err := Measure(root)
	if err != nil {
		t.Fatal(err)
	}
	if f.LargestType != "shared/scheduler.Service" || f.LargestMethods != 3 {
		t.Errorf("largest type %s with %d methods, want shared/scheduler.Service with 3", f.LargestType, f.LargestMethods)
	}
	// a.go -> b.go (two) and b.go -> a.go (Service, One): a cycle; c.go
	// is named by nobody.
	if f.TangledPackage != "shared/scheduler" || f.FileArrows != 2 || f.BackArrows != 2 {
		t.Errorf("tangle %s: %d arrows, %d on a cycle; want 2 and 2", f.TangledPackage, f.FileArrows, f.BackArrows)
	}
	if want := []string{"shared/scheduler.counts", "shared/scheduler.mu"}; !slices.Equal(f.MutableVars, want) {
		t.Errorf("mutable variables %v, want %v", f.MutableVars, want)
	}
	if want := []string{"shared/ledger/update.go:Update", "shared/scheduler/b.go:loop", "shared/scheduler/d.go:retry", "shared/scheduler/d.go:lower"}; !slices.Equal(f.UpdateLoops, want) {
		t.Errorf("read-decide-write loops %v, want %v (the bounded loop that reads and writes)", f.UpdateLoops, want)
	}
	if want := []string{"shared/scheduler/a.go:8", "shared/scheduler/room/r.go:3"}; !slices.Equal(f.SchedulerJobspecLoads, want) {
		t.Errorf("jobspec.Load calls %v, want %v (the scheduler's and its rooms')", f.SchedulerJobspecLoads, want)
	}
	if want := []string{"shared/scheduler/flow", "shared/scheduler/maps", "shared/scheduler/room"}; !slices.Equal(f.Rooms, want) {
		t.Errorf("rooms %v, want %v", f.Rooms, want)
	}
	// maps imports the API (a caller of the kernel) and another room; the
	// ledger, below the kernel, is no arrow back.
	if want := []string{"shared/scheduler/maps -> shared/api", "shared/scheduler/maps -> shared/scheduler/flow"}; !slices.Equal(f.RoomBackImports, want) {
		t.Errorf("imports back up %v, want %v", f.RoomBackImports, want)
	}
}
