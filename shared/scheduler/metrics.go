package scheduler

import (
	"encoding/json"
	"sync"

	"github.com/runledger/runledger/shared/store"
	"github.com/runledger/runledger/statemodel"
)

// MetricsNamespace is the CloudWatch namespace of the embedded metrics; the
// CDK stack's alarms read InstanceLost and QueueWait from it.
const MetricsNamespace = "Runledger"

var metricsMu sync.Mutex

// emitTransitionMetrics writes CloudWatch embedded-metric-format lines for
// the transitions that alarms watch: every move to LOST, and every claim's
// queue wait (from transition times, never from created/updated columns).
func (s *Service) emitTransitionMetrics(key store.InstanceKey, snap statemodel.Snapshot, tr *statemodel.Transition) {
	switch {
	case tr.To == statemodel.StateLost:
		s.emit("InstanceLost", "Count", 1, key, tr.Attempt)
	case tr.Event == statemodel.EvStarted:
		if a, ok := snap.AttemptN(tr.Attempt); ok {
			if m := a.Metrics(); m.QueueWait != nil {
				s.emit("QueueWait", "Milliseconds", float64(m.QueueWait.Milliseconds()), key, tr.Attempt)
			}
		}
	}
}

func (s *Service) emit(name, unit string, value float64, key store.InstanceKey, attempt int) {
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": s.now().UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  MetricsNamespace,
				"Dimensions": [][]string{{}},
				"Metrics":    []any{map[string]string{"Name": name, "Unit": unit}},
			}},
		},
		name:      value,
		"run_id":  key.Run,
		"task":    key.Task,
		"attempt": attempt,
	}
	b, err := json.Marshal(line)
	if err != nil {
		return
	}
	metricsMu.Lock()
	defer metricsMu.Unlock()
	_, _ = s.cfg.Metrics.Write(append(b, '\n'))
}
