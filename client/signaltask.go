package client

import (
	"context"
	"encoding/json"
	"net/http"
)

// Signal outcomes.
const (
	SignalSucceeded = "succeeded"
	SignalFailed    = "failed"
)

// SignalRequest settles a waiting signal task (a task whose executor is
// {"type": "signal"}): Outcome SignalSucceeded (approve) or SignalFailed
// (reject; the task's retry policy decides what follows). By (1 to 128
// characters) is who decided, kept in the transition's evidence; Reason
// (at most 4 KiB) and OutputRef are kept too. Output (any JSON, at most 16
// KiB encoded) is a succeeding signal's task output: its direct downstream
// tasks get it as their inputs. The same EventID again is answered with
// the first outcome.
type SignalRequest struct {
	Outcome   string          `json:"outcome"`
	By        string          `json:"by"`
	Reason    string          `json:"reason,omitempty"`
	OutputRef string          `json:"output_ref,omitempty"`
	EventID   string          `json:"event_id,omitempty"`
	Output    json.RawMessage `json:"output,omitempty"`
}

// Signal settles a waiting signal task and answers its run. The client's
// API key authorizes it; the holder of the attempt token a
// task.signal_requested notice carried may instead build a client with
// that token as its APIKey (it authorizes this call for that task only).
// A task not waiting as a signal task is CodeIllegalTransition; an older
// attempt's token CodeStaleAttempt.
func (c *Client) Signal(ctx context.Context, run, task string, r SignalRequest) (RunDetail, error) {
	var out RunDetail
	_, err := c.do(ctx, call{op: "signal task " + run + "/" + task, method: http.MethodPost,
		path: taskPath(run, task, "signal"), body: r}, &out)
	return out, err
}
