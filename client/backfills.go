package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

// The answers about backfills (docs/api.md, "Backfill").
type (
	// Backfill is a backfill with its counts.
	Backfill = protocol.Backfill
	// BackfillCounts say where a backfill's created slots stand.
	BackfillCounts = protocol.BackfillCounts
	// BackfillPage is one page of a job's backfills, newest first.
	BackfillPage = protocol.BackfillPage
)

// BackfillRequest is what Backfill sends: the range [From, To) of the
// job's schedule, MaxActive (0: the server's default, 1) and the params
// of every run (any value that encodes to a JSON object; nil: none).
type BackfillRequest struct {
	From, To  time.Time
	MaxActive int
	Params    any
}

type backfillBody struct {
	From      string          `json:"from"`
	To        string          `json:"to"`
	MaxActive *int            `json:"max_active,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
}

// Backfill starts a backfill of a job: one run per slot of its schedule in
// [From, To), oldest first, at most MaxActive unfinished at once. The
// answer comes at once; runs are created as they are released.
func (c *Client) Backfill(ctx context.Context, job string, r BackfillRequest) (Backfill, error) {
	body := backfillBody{From: protocol.FormatTime(r.From), To: protocol.FormatTime(r.To)}
	if r.MaxActive != 0 {
		body.MaxActive = &r.MaxActive
	}
	if r.Params != nil {
		p, err := encodeBody(r.Params)
		if err != nil {
			return Backfill{}, err
		}
		body.Params = p
	}
	var out protocol.BackfillAnswer
	_, err := c.do(ctx, call{op: "backfill job " + job, method: http.MethodPost, path: "/v1/jobs/" + seg(job) + "/backfill", body: body}, &out)
	return out.Backfill, err
}

// GetBackfill reads a backfill with its current counts and state.
func (c *Client) GetBackfill(ctx context.Context, id string) (Backfill, error) {
	var out protocol.BackfillAnswer
	_, err := c.do(ctx, call{op: "get backfill " + id, method: http.MethodGet, path: "/v1/backfills/" + seg(id)}, &out)
	return out.Backfill, err
}

// ListBackfills lists one page of a job's backfills, newest first.
func (c *Client) ListBackfills(ctx context.Context, job string, page Page) (BackfillPage, error) {
	var out BackfillPage
	_, err := c.do(ctx, call{op: "list backfills of " + job, method: http.MethodGet, path: "/v1/jobs/" + seg(job) + "/backfills", query: page.query()}, &out)
	return out, err
}

// CancelBackfill drops the backfill's unreleased slots and cancels its
// unfinished runs; one that ended is CodeIllegalTransition.
func (c *Client) CancelBackfill(ctx context.Context, id, reason string) (Backfill, error) {
	var out protocol.BackfillAnswer
	_, err := c.do(ctx, call{op: "cancel backfill " + id, method: http.MethodPost, path: "/v1/backfills/" + seg(id) + "/cancel", body: action{Reason: reason}}, &out)
	return out.Backfill, err
}

// WaitBackfill polls the backfill every interval (0: one second) until it
// ended or ctx ends, and answers its last reading.
func (c *Client) WaitBackfill(ctx context.Context, id string, interval time.Duration) (Backfill, error) {
	return waitFor(ctx, interval, "backfill "+id, func() (Backfill, error) { return c.GetBackfill(ctx, id) },
		func(b Backfill) bool { return !b.EndedAt.IsZero() })
}
