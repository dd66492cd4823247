package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runledger/runledger/client"
)

func TestMapAndOutput(t *testing.T) {
	long := json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)
	for _, c := range []struct {
		task client.Task
		want string
	}{
		{client.Task{}, ""},
		{client.Task{Output: json.RawMessage(`{"rows":42}`)}, `output {"rows":42}`},
		{client.Task{Output: long}, "output " + string(long[:maxShownOutput]) + "..."},
		{client.Task{Map: &client.MapCounts{Total: 10, Pending: 5, Running: 2, Succeeded: 2, Failed: 1}}, "map 2/10 ok 2 running 5 pending 1 failed"},
		{client.Task{Map: &client.MapCounts{Total: 3, Succeeded: 3}, OutputTruncated: true}, "map 3/3 ok output over 256 KiB (children paged)"},
	} {
		if got := strings.Join(mapAndOutput(c.task), " "); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
