package protocol

// RunEvent names the event that started a run (trigger event): the run
// answer's "event" field, and what the store keeps on the run.
type RunEvent struct {
	ID         string `json:"id"`
	Source     string `json:"source"`
	DetailType string `json:"detail_type"`
}
