package protocol

import (
	"encoding/json"
	"time"

	"github.com/runledger/runledger/statemodel"
)

// Backfill is a backfill's answer (docs/api.md, "Backfill"): the range,
// how many slots it holds, how many it creates runs for (created) and how
// many had a run already (existing), and where its runs stand.
type Backfill struct {
	ID        string          `json:"id"`
	Job       string          `json:"job"`
	From      time.Time       `json:"from"`
	To        time.Time       `json:"to"`
	MaxActive int             `json:"max_active"`
	Params    json.RawMessage `json:"params"`
	Slots     int             `json:"slots"`
	Created   int             `json:"created"`
	Existing  int             `json:"existing"`
	// State is RUNNING, then SUCCEEDED, FAILED or CANCELLED.
	State     statemodel.BackfillState `json:"state"`
	CreatedAt time.Time                `json:"created_at"`
	// EndedAt is null while the backfill has slots to release or runs
	// unfinished.
	EndedAt time.Time      `json:"ended_at"`
	Counts  BackfillCounts `json:"counts"`
}

// MarshalJSON writes the contract's shape.
func (b Backfill) MarshalJSON() ([]byte, error) { return marshalView(b) }

// BackfillCounts say where a backfill's created slots stand: pending (not
// released yet), running (released, unfinished), and the runs that ended;
// cancelled also counts the slots a cancel dropped.
type BackfillCounts struct {
	Pending   int `json:"pending"`
	Running   int `json:"running"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// BackfillAnswer is the answer of the routes about one backfill.
type BackfillAnswer struct {
	Backfill Backfill `json:"backfill"`
}

// BackfillPage is one page of GET /v1/jobs/{job}/backfills, newest first.
type BackfillPage struct {
	Backfills []Backfill `json:"backfills"`
	// NextToken continues the listing; "" (null on the wire) on the last
	// page.
	NextToken string `json:"next_token" null:"zero"`
}

// MarshalJSON writes the contract's shape.
func (p BackfillPage) MarshalJSON() ([]byte, error) { return marshalView(p) }
