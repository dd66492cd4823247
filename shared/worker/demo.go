package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// DemoPayload is what DemoHandler understands in a task's payload; every
// field is optional and other fields are ignored.
type DemoPayload struct {
	// Sleep is a Go duration the handler waits (ending early when its ctx
	// ends), to show heartbeats and cancellation.
	Sleep string `json:"sleep,omitempty"`
	// Fail makes the attempt fail (retryable, category "demo_failure").
	Fail bool `json:"fail,omitempty"`
	// Permanent, with Fail, makes the failure non-retryable.
	Permanent bool `json:"permanent,omitempty"`
}

// DemoHandler is the example handler of the demo pool (the Lambda worker
// and the local stack's demo worker): it logs the payload, optionally
// sleeps, fails when the payload says "fail": true, and otherwise succeeds
// with an output ref naming the attempt.
func DemoHandler(ctx context.Context, t Task) error {
	var p DemoPayload
	if len(t.Payload) > 0 {
		if err := json.Unmarshal(t.Payload, &p); err != nil {
			// Any JSON is a valid payload; only an object has our fields.
			p = DemoPayload{}
		}
	}
	log := t.Log
	if log == nil {
		log = slog.Default()
	}
	log.InfoContext(ctx, "demo task", "payload", json.RawMessage(orNull(t.Payload)), "params", json.RawMessage(orNull(t.Params)))
	if p.Sleep != "" {
		d, err := time.ParseDuration(p.Sleep)
		if err != nil {
			return Permanent(WithCategory(fmt.Errorf("demo task %s: sleep %q: %w", t.Ref(), p.Sleep, err), "invalid_payload"))
		}
		if !sleep(ctx, d) {
			return ctx.Err()
		}
	}
	if p.Fail {
		err := WithExitCode(WithCategory(fmt.Errorf("demo task %s: %w", t.Ref(), errDemoFailure), "demo_failure"), 1)
		if p.Permanent {
			err = Permanent(err)
		}
		return err
	}
	return t.SetOutputRef(fmt.Sprintf("demo://%s/%s/%d", t.Run, t.Task, t.Attempt))
}

var errDemoFailure = errors.New("the payload asked to fail")

func orNull(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return json.RawMessage("null")
	}
	return m
}
