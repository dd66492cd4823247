package statemodel

// Downstream lists the tasks below id in the run's graph, transitively
// (those that depend on id, those that depend on them, ...), in the
// order nodes lists them. id itself is not listed; an unknown id has no
// downstream.
func Downstream(nodes []TaskNode, id string) []string {
	below := map[string][]string{} // task -> the tasks that depend on it
	for _, n := range nodes {
		for _, up := range n.DependsOn {
			below[up] = append(below[up], n.ID)
		}
	}
	reached := map[string]bool{}
	stack := append([]string(nil), below[id]...)
	for len(stack) > 0 {
		t := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if reached[t] || t == id {
			continue
		}
		reached[t] = true
		stack = append(stack, below[t]...)
	}
	var out []string
	for _, n := range nodes {
		if reached[n.ID] {
			out = append(out, n.ID)
		}
	}
	return out
}
