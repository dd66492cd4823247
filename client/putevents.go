package client

import (
	"context"
	"net/http"

	"github.com/runledger/runledger/shared/protocol"
)

type (
	// PutEventsEntry is one trigger event to deliver (POST /v1/events/put):
	// Source, DetailType, Detail (JSON text of an object), Resources and
	// Time (RFC 3339; "" is now).
	PutEventsEntry = protocol.PutEventsEntry
	// PutEventsAnswer names the id given to each entry's event.
	PutEventsAnswer = protocol.PutEventsAnswer
)

// PutEvents delivers 1 to 10 trigger events as EventBridge's PutEvents
// would: each job whose on_event matches one gets one run of it before
// the answer (docs/api.md, "Starting runs from trigger events"). It is
// the local stack's ingress; a deployed stack takes trigger events from
// its buses' rules.
func (c *Client) PutEvents(ctx context.Context, entries ...PutEventsEntry) (PutEventsAnswer, error) {
	var out PutEventsAnswer
	_, err := c.do(ctx, call{op: "put events", method: http.MethodPost, path: "/v1/events/put",
		body: protocol.PutEvents{Entries: entries}}, &out)
	return out, err
}
