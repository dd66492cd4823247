package ledgertest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
)

func init() {
	runCases = append(runCases, Case{"ListingPagesNewestFirst", listingPages})
}

// listingPages: the runs' listing pages through many runs (the DynamoDB
// store spreads their listing entries over shards and merges them) newest
// first, each run once, at every page size, and a job's listing the same.
func listingPages(t *testing.T, h *Harness) {
	ctx := context.Background()
	var want, wantA []string
	for i := range 11 {
		job := "list-a"
		if i%3 == 0 {
			job = "list-b"
		}
		v := h.MustCreate(t, NewRun(job, "main"))
		want = append(want, v.Run.ID)
		if job == "list-a" {
			wantA = append(wantA, v.Run.ID)
		}
	}
	newestFirst := func(ids []string) []string {
		out := slices.Clone(ids)
		slices.SortFunc(out, func(a, b string) int { return strings.Compare(b, a) })
		return out
	}
	want, wantA = newestFirst(want), newestFirst(wantA)
	for _, job := range []string{"", "list-a"} {
		expect := want
		if job != "" {
			expect = wantA
		}
		for _, limit := range []int{1, 2, 3, 5, 11, 50} {
			var got []string
			token := ""
			for pages := 0; ; pages++ {
				if pages > len(expect)+1 {
					t.Fatalf("job %q limit %d: the listing does not end: %v", job, limit, got)
				}
				page, next, err := h.Store.ListRuns(ctx, ledger.RunFilter{Job: job, Limit: limit, Token: token})
				if err != nil {
					t.Fatalf("job %q limit %d page %d: %v", job, limit, pages, err)
				}
				if len(page) > limit {
					t.Fatalf("job %q limit %d: a page of %d runs", job, limit, len(page))
				}
				got = append(got, ids(page)...)
				if next == "" {
					break
				}
				token = next
			}
			if !slices.Equal(got, expect) {
				t.Fatalf("job %q limit %d: listed\n%v\nwant newest first, each once\n%v", job, limit, got, expect)
			}
		}
	}
}
