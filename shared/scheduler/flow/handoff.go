package flow

import (
	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel/limiter"
)

// HandOff is what a hand-off admitted, for the effects it performs: the
// runs it admitted in one limiter, and outer, the hand-off whose effects
// made this one (nil: none). Their evaluation knows them admitted there
// without an entry or a look (an admitted run stays so until it ends, and
// its end releases it). It travels on the hand-off's work (Work.HandOff),
// on the kernel's effects that work yields, and in the calls that enter
// and release runs; a nil *HandOff admitted nothing.
type HandOff struct {
	limiter string
	runs    map[string]bool
	outer   *HandOff
}

// then is what a hand-off in limiter name that admitted got, made by h's
// effects, carries: h itself when it admitted nobody.
func (h *HandOff) then(name string, got []ledger.Admitted) *HandOff {
	if len(got) == 0 {
		return h
	}
	n := &HandOff{limiter: name, runs: map[string]bool{}, outer: h}
	for _, a := range got {
		n.runs[a.RunID] = true
	}
	return n
}

// Admitted reports whether h, or a hand-off around it, admitted runID, in
// any limiter.
func (h *HandOff) Admitted(runID string) bool {
	for ; h != nil; h = h.outer {
		if h.runs[runID] {
			return true
		}
	}
	return false
}

// admittedIn reports whether h, or a hand-off around it, admitted runID in
// limiter name (or, name a group, in one of its shards).
func (h *HandOff) admittedIn(name, runID string) bool {
	for ; h != nil; h = h.outer {
		if limiter.InGroup(h.limiter, name) && h.runs[runID] {
			return true
		}
	}
	return false
}
