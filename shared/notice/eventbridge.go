package notice

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/wire"
)

// PutEventsAPI is what EventBridge sends with; *eventbridge.Client
// implements it.
type PutEventsAPI interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// EventBridge delivers notices to an event bus: one entry per notice, with
// source protocol.NoticeSource, the notice's type as detail-type and the
// notice itself (its API shape) as detail, so a rule matches on
// {"source": ["runledger"], "detail-type": ["run.failed"]} and reads the
// run, job and reason from the detail.
type EventBridge struct {
	Client PutEventsAPI
	// Bus is the event bus's name or ARN.
	Bus string
}

// FailedEntriesError is a PutEvents that EventBridge accepted only in
// part: Failed of its entries were refused (Code is the first refusal's
// error code), also after one retry of those entries.
type FailedEntriesError struct {
	Failed, Of int
	Code       string
}

func (e *FailedEntriesError) Error() string {
	return fmt.Sprintf("put events: %d of %d entries refused (%s)", e.Failed, e.Of, e.Code)
}

// Send puts batch (at most MaxBatch notices) on the bus in one PutEvents
// call; entries EventBridge refuses (throttling, an internal failure) are
// sent once more.
func (e EventBridge) Send(ctx context.Context, batch []protocol.Notice) error {
	if len(batch) > MaxBatch {
		return fmt.Errorf("put events: %d entries, at most %d a call", len(batch), MaxBatch)
	}
	entries := make([]types.PutEventsRequestEntry, 0, len(batch))
	for _, note := range batch {
		detail, err := wire.Marshal(note)
		if err != nil {
			return fmt.Errorf("put events: encode %s of run %s: %w", note.Type, note.Run, err)
		}
		entries = append(entries, types.PutEventsRequestEntry{
			EventBusName: aws.String(e.Bus), Source: aws.String(protocol.NoticeSource),
			DetailType: aws.String(string(note.Type)), Detail: aws.String(string(detail)), Time: aws.Time(note.Time),
		})
	}
	of := len(entries)
	var code string
	for try := 0; try < 2 && len(entries) > 0; try++ {
		out, err := e.Client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		if err != nil {
			return fmt.Errorf("put events on bus %s: %w", e.Bus, err)
		}
		if out.FailedEntryCount == 0 {
			return nil
		}
		// Results are in the order of the entries; a failed one carries an
		// error code.
		var again []types.PutEventsRequestEntry
		for i, r := range out.Entries {
			if r.ErrorCode != nil && i < len(entries) {
				again = append(again, entries[i])
				if code == "" {
					code = aws.ToString(r.ErrorCode)
				}
			}
		}
		entries = again
	}
	if len(entries) == 0 {
		return nil
	}
	return &FailedEntriesError{Failed: len(entries), Of: of, Code: code}
}
