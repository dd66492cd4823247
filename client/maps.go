package client

import (
	"context"
	"net/http"

	"github.com/runledger/runledger/shared/protocol"
)

type (
	// ChildrenPage is one page of a map task's children, in index order.
	ChildrenPage = protocol.ChildrenPage
	// MapCounts are a map task's children by where they stand
	// (Task.Map).
	MapCounts = protocol.MapCounts
)

// Children pages a map task's children in index order (GET
// /v1/runs/{run}/tasks/{task}/children).
func (c *Client) Children(ctx context.Context, run, task string, page Page) (ChildrenPage, error) {
	var out ChildrenPage
	_, err := c.do(ctx, call{
		op: "children of " + run + "/" + task, method: http.MethodGet,
		path: "/v1/runs/" + seg(run) + "/tasks/" + seg(task) + "/children", query: page.query(),
	}, &out)
	return out, err
}
