package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// A map task's children are instances named "<task>[<i>]". They live
// apart from the run's static tasks (ReadRun does not read them), and
// their parent's counts live in its map item (MapState), which each
// child's final write updates in the same atomic write.

// ChildTask names child i of the map task parent.
func ChildTask(parent string, i int) string { return parent + "[" + strconv.Itoa(i) + "]" }

// ParseChild splits a child's name into its map task and index; ok is
// false for a task that is not a map child.
func ParseChild(task string) (parent string, i int, ok bool) {
	if !strings.HasSuffix(task, "]") {
		return "", 0, false
	}
	open := strings.LastIndexByte(task, '[')
	if open <= 0 {
		return "", 0, false
	}
	digits := task[open+1 : len(task)-1]
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
		return "", 0, false
	}
	return task[:open], n, true
}

// MapState is a map task's item: what its over rendered to, and its
// children's counts. Next children have been released (0..Next-1);
// Running of them are not ended; Succeeded, Failed and Cancelled have.
type MapState struct {
	Run, Task         string
	Total, Next       int
	Running           int
	Succeeded, Failed int
	Cancelled         int
	MaxParallel       int
	Tolerated         int
	// ExpiresAt is its run's expiry, from the map task's instance, stamped
	// on the map's items when created.
	ExpiresAt time.Time
}

// Pending is how many children are not released yet.
func (m MapState) Pending() int { return m.Total - m.Next }

// Ended reports whether every child has ended.
func (m MapState) Ended() bool { return m.Next >= m.Total && m.Running <= 0 }

// Free is how many children may be released now.
func (m MapState) Free() int { return max(0, min(m.MaxParallel-m.Running, m.Total-m.Next)) }

// Succeeds reports whether an ended map succeeds: at most Tolerated
// children ended other than SUCCEEDED.
func (m MapState) Succeeds() bool { return m.Total-m.Succeeded <= m.Tolerated }

// MapBucket is the count a child's state adds to: "" while it runs (or
// waits), else succeeded, failed or cancelled.
func MapBucket(s statemodel.InstanceState) string {
	switch s {
	case statemodel.StateSucceeded:
		return "succeeded"
	case statemodel.StateFailed, statemodel.StateUpstreamFailed:
		return "failed"
	case statemodel.StateCancelled, statemodel.StateSkipped:
		return "cancelled"
	}
	return ""
}

// MapItemsPerChunk is how many rendered elements one items chunk holds.
const MapItemsPerChunk = 500

// Maps keeps map tasks: their items and counts, and their children.
type Maps interface {
	// CreateMap writes a map's item and the chunks of its rendered
	// elements in one write, once: ErrConflict when it exists.
	CreateMap(ctx context.Context, m MapState, items [][]byte) error
	// GetMap reads a map's item (strongly consistent).
	GetMap(ctx context.Context, run, task string) (MapState, error)
	// MapItems reads chunk c of a map's elements.
	MapItems(ctx context.Context, run, task string, c int) ([][]byte, error)
	// ReleaseChildren moves Next from m.Next to m.Next+k, in one write
	// conditioned on Next being m.Next (ErrVersionConflict when it moved,
	// with m whose Next is the one found). m is the map as the caller read it: with Next unchanged, Running can
	// only have fallen since, so room it showed is there (CheckMapRelease
	// refuses a k it has no room for).
	ReleaseChildren(ctx context.Context, m MapState, k int) (MapState, error)
	// CloseMap releases no more children: the pending ones count as
	// cancelled, in one write conditioned on Next being m.Next
	// (ErrVersionConflict when it moved).
	CloseMap(ctx context.Context, m MapState) (MapState, error)
	// CreateChildren writes released children's instances; one that
	// exists already is left as it is.
	CreateChildren(ctx context.Context, insts []Instance) error
	// ListChildren pages a map's children in index order.
	ListChildren(ctx context.Context, run, task string, limit int, token string) ([]Instance, string, error)
	// SetMapOutput keeps a map's output once it ended (nil with
	// truncated when it would be over MaxMapOutputBytes).
	SetMapOutput(ctx context.Context, run, task string, out []byte, truncated bool) error
	// GetMapOutput reads it: ErrNotFound before.
	GetMapOutput(ctx context.Context, run, task string) (out []byte, truncated bool, err error)
}

// MaxMapOutputBytes bounds a map task's output, the array of its
// children's outputs.
const MaxMapOutputBytes = 256 << 10

// MapCountChange is what a child's write adds to its map's counts; nil
// when the write leaves its bucket as it was.
func MapCountChange(key InstanceKey, from, to statemodel.InstanceState) map[string]int {
	if _, _, ok := ParseChild(key.Task); !ok {
		return nil
	}
	a, b := MapBucket(from), MapBucket(to)
	if a == b {
		return nil
	}
	add := map[string]int{}
	if a == "" {
		add["running"]--
	} else {
		add[a]--
	}
	if b == "" {
		add["running"]++
	} else {
		add[b]++
	}
	return add
}

// CheckMapRelease refuses a release of k children that m, as the caller
// read it, has no room or no children for.
func CheckMapRelease(m MapState, k int) error {
	if k < 1 || m.Next+k > m.Total || k > m.MaxParallel-m.Running {
		return fmt.Errorf("%w: release %d of %d..%d with %d of %d running", ErrInvalidInput, k, m.Next, m.Total, m.Running, m.MaxParallel)
	}
	return nil
}

// CheckMapKey checks a map's run and task.
func CheckMapKey(run, task string) error {
	if err := CheckInstanceKey(InstanceKey{Run: run, Task: task}); err != nil {
		return fmt.Errorf("map %s/%s: %w", run, task, err)
	}
	return nil
}
