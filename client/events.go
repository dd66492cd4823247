package client

import (
	"context"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

type (
	// Event is one event of the local stack (docs/api.md, "Events"): a run
	// that ended, a task that failed or went LOST, a missed deadline. Task
	// is "" for a run's event.
	Event = protocol.Notice
	// EventType is an Event's type ("run.failed", ...).
	EventType = protocol.NoticeType
	// EventPage is one page of ListEvents, oldest first; NextToken is ""
	// when no more events are kept yet.
	EventPage = protocol.NoticePage
)

// EventFilter selects events for ListEvents: those at or after Since
// (zero: every kept one), one page.
type EventFilter struct {
	Since time.Time
	Page
}

// ListEvents lists one page of the local stack's kept events, oldest
// first. A deployed stack publishes its events to EventBridge instead and
// answers not_found.
func (c *Client) ListEvents(ctx context.Context, f EventFilter) (EventPage, error) {
	q := f.query()
	if !f.Since.IsZero() {
		q.Set("since", protocol.FormatTime(f.Since))
	}
	var out EventPage
	_, err := c.do(ctx, call{op: "list events", method: http.MethodGet, path: "/v1/events", query: q}, &out)
	return out, err
}
