package scheduler

import (
	"fmt"
	"testing"
)

// A job version is compiled once: the same spec gives the same compiled
// form, another version another; a spec that fails to load is not kept;
// and the cache keeps at most maxCompiledJobs versions.
func TestCompiledJobsCompileEachVersionOnce(t *testing.T) {
	t.Parallel()
	var jobs compiledJobs
	v1 := []byte(`{"name": "orders", "concurrency": {"limit": 2, "key": "{{.Params.customer}}"}}`)
	v2 := []byte(`{"name": "orders", "concurrency": {"limit": 3, "key": "{{.Params.customer}}"}}`)
	a, err := jobs.of(v1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := jobs.of(append([]byte(nil), v1...))
	if err != nil || again != a {
		t.Errorf("the same spec again: %p, %v; want the compiled form %p", again, err, a)
	}
	b, err := jobs.of(v2)
	if err != nil || b == a || b.Job.Concurrency.Limit != 3 {
		t.Errorf("another version: %p (limit %d), %v; want its own form, not %p", b, b.Job.Concurrency.Limit, err, a)
	}
	if _, err := jobs.of([]byte(`{"name": "Bad Name"}`)); err == nil {
		t.Error("a spec that does not load compiled")
	}
	if len(jobs.bySpec) != 2 {
		t.Errorf("%d versions kept, want 2", len(jobs.bySpec))
	}

	for i := range maxCompiledJobs + 10 {
		if _, err := jobs.of(fmt.Appendf(nil, `{"name": "job-%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	size := 0
	for _, e := range jobs.bySpec {
		size += e.size
	}
	if len(jobs.bySpec) != maxCompiledJobs || jobs.specBytes != size {
		t.Errorf("%d versions of %d bytes kept (counted %d), want %d", len(jobs.bySpec), size, jobs.specBytes, maxCompiledJobs)
	}
}
