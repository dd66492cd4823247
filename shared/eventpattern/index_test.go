package eventpattern

import (
	"fmt"
	"reflect"
	"testing"
)

func mustCompile(t testing.TB, s string) *Pattern {
	t.Helper()
	p, err := Compile([]byte(s))
	if err != nil {
		t.Fatalf("compile %s: %v", s, err)
	}
	return p
}

// population is n owners of one or two patterns over 100 sources and 10
// detail-types, one owner in 50 with a source prefix (not indexable by
// source) and one in 20 with no detail-type, like a deployment of many jobs
// listening to a few buses.
func population(t testing.TB, n int) []Entry {
	entries := make([]Entry, n)
	for i := range entries {
		src, dt := fmt.Sprintf("app.svc%d", i%100), fmt.Sprintf("Type%d", (i/100)%10)
		var pats []*Pattern
		switch {
		case i%50 == 7:
			pats = append(pats, mustCompile(t, fmt.Sprintf(`{"source": [{"prefix": "app.svc%d"}], "detail": {"tenant": ["t%d"]}}`, i%100, i%7)))
		case i%20 == 3:
			pats = append(pats, mustCompile(t, fmt.Sprintf(`{"source": [%q], "detail": {"amount": [{"numeric": [">", %d]}]}}`, src, i%1000)))
		default:
			pats = append(pats, mustCompile(t, fmt.Sprintf(`{"source": [%q], "detail-type": [%q], "detail": {"tenant": ["t%d"], "state": [{"anything-but": "draft"}]}}`, src, dt, i%7)))
		}
		if i%3 == 0 {
			pats = append(pats, mustCompile(t, fmt.Sprintf(`{"source": [%q], "detail-type": [%q, "Other"]}`, src, dt)))
		}
		entries[i] = Entry{Key: fmt.Sprintf("job-%05d", i), Patterns: pats}
	}
	return entries
}

func populationEvent(i int) map[string]any {
	ev, err := DecodeEvent([]byte(fmt.Sprintf(`{"id": "e%d", "source": "app.svc%d", "detail-type": "Type%d", "account": "123456789012", "region": "eu-west-1",
		"resources": [], "detail": {"tenant": "t%d", "state": "placed", "amount": %d}}`, i, i%100, (i/7)%10, i%7, i%1500)))
	if err != nil {
		panic(err)
	}
	return ev
}

// bruteForce tests every pattern of every entry.
func bruteForce(entries []Entry, ev map[string]any) []Hit {
	var hits []Hit
	for _, e := range entries {
		for i, p := range e.Patterns {
			if p.Match(ev) {
				hits = append(hits, Hit{Key: e.Key, Pattern: i})
				break
			}
		}
	}
	return hits
}

func TestIndexAnswersAsTestingEveryPattern(t *testing.T) {
	entries := population(t, 2000)
	ix := NewIndex(entries)
	matched := 0
	for i := range 300 {
		ev := populationEvent(i)
		got, want := ix.Match(ev), bruteForce(entries, ev)
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		matched++
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d: index %v, every pattern %v", i, got, want)
		}
	}
	if matched == 0 {
		t.Fatal("no event matched any pattern: the population tests nothing")
	}
}

func TestIndexFirstMatchingPatternOfEachOwner(t *testing.T) {
	ix := NewIndex([]Entry{
		{Key: "b", Patterns: []*Pattern{
			mustCompile(t, `{"source": ["shop"], "detail": {"kind": ["refund"]}}`),
			mustCompile(t, `{"source": [{"prefix": "sh"}]}`),
			mustCompile(t, `{"source": ["shop"]}`),
		}},
		{Key: "a", Patterns: []*Pattern{mustCompile(t, `{"detail-type": ["Order Placed"]}`)}},
		{Key: "c", Patterns: []*Pattern{mustCompile(t, `{"source": ["other"]}`)}},
	})
	ev, _ := DecodeEvent([]byte(`{"source": "shop", "detail-type": "Order Placed", "detail": {"kind": "order"}}`))
	got := ix.Match(ev)
	want := []Hit{{Key: "a", Pattern: 0}, {Key: "b", Pattern: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("hits %v, want %v", got, want)
	}
	if ix.Len() != 5 {
		t.Fatalf("Len = %d, want 5", ix.Len())
	}
}

// BenchmarkIndexMatch10000 is one event against 10,000 owners' patterns
// (the figure rlbench reports as event_match_us).
func BenchmarkIndexMatch10000(b *testing.B) {
	ix := NewIndex(population(b, 10000))
	events := make([]map[string]any, 64)
	for i := range events {
		events[i] = populationEvent(i)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ix.Match(events[i%len(events)])
	}
}
