package store

import (
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// attrRunEvent holds the event that started a run (trigger event), as the
// JSON of protocol.RunEvent; absent on other runs.
const attrRunEvent = "trigger_event"

func eventAttr(e *protocol.RunEvent) types.AttributeValue {
	if e == nil {
		return nil
	}
	b, err := wire.Marshal(e)
	if err != nil {
		return nil
	}
	return str(string(b))
}

// runEvent reads attrRunEvent; a malformed value sets the reader's error.
func (r *reader) runEvent() *protocol.RunEvent {
	s := r.str(attrRunEvent)
	if s == "" {
		return nil
	}
	var e protocol.RunEvent
	if err := json.Unmarshal([]byte(s), &e); err != nil {
		if r.err == nil {
			r.err = fmt.Errorf("attribute %s: %w", attrRunEvent, err)
		}
		return nil
	}
	return &e
}
