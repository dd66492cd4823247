package scheduler

import "encoding/json"

// dispatchers are the functions that dispatch attempts, so start them on
// executors other than the queues.
var dispatchers = []string{FunctionAPI, FunctionEvents, FunctionTicker, FunctionReconciler}

// executorsAllowed is RUNLEDGER_EXECUTORS_ALLOWED: what job definitions
// may name outside the queues (shared/jobspec's Allowed, as JSON), from
// every executor's props; "" when the props allow none.
func executorsAllowed(p Props) string {
	allowed := map[string][]string{}
	if p.Lambda != nil {
		allowed["lambda_functions"] = p.Lambda.Functions
	}
	if p.ECS != nil {
		allowed["ecs_clusters"] = p.ECS.Clusters
		allowed["ecs_task_definitions"] = p.ECS.families()
	}
	if len(allowed) == 0 {
		return ""
	}
	b, _ := json.Marshal(allowed) // strings only: cannot fail
	return string(b)
}

// wireExecutorsAllowed gives the functions that dispatch the allow-lists
// the scheduler checks job definitions against.
func (s *Scheduler) wireExecutorsAllowed(p Props) {
	allowed := executorsAllowed(p)
	if allowed == "" {
		return
	}
	for _, name := range dispatchers {
		if _, ok := s.Functions[name]; ok {
			s.setEnv(name, "RUNLEDGER_EXECUTORS_ALLOWED", &allowed)
		}
	}
}
