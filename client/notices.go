package client

import (
	"context"
	"net/http"
	"time"

	"github.com/runledger/runledger/shared/protocol"
)

type (
	// Notice is one notice of the local stack (docs/api.md, "Notices"): a
	// run that ended, a task that failed or went LOST, a missed deadline.
	// Task is "" for a run's notice.
	Notice = protocol.Notice
	// NoticeType is a Notice's type ("run.failed", ...).
	NoticeType = protocol.NoticeType
	// NoticePage is one page of ListNotices, oldest first; NextToken is ""
	// when no more notices are kept yet.
	NoticePage = protocol.NoticePage
)

// NoticeFilter selects notices for ListNotices: those at or after Since
// (zero: every kept one), one page.
type NoticeFilter struct {
	Since time.Time
	Page
}

// ListNotices lists one page of the local stack's kept notices
// (GET /v1/events), oldest first. A deployed stack publishes its notices
// to EventBridge instead and answers not_found.
func (c *Client) ListNotices(ctx context.Context, f NoticeFilter) (NoticePage, error) {
	q := f.query()
	if !f.Since.IsZero() {
		q.Set("since", protocol.FormatTime(f.Since))
	}
	var out NoticePage
	_, err := c.do(ctx, call{op: "list notices", method: http.MethodGet, path: "/v1/events", query: q}, &out)
	return out, err
}
