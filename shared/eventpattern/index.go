package eventpattern

import "sort"

// Entry is one owner's patterns (a job's on_event entries, in order).
type Entry struct {
	Key      string
	Patterns []*Pattern
}

// Hit is an owner whose patterns match an event: Pattern is the first of
// its patterns that does.
type Hit struct {
	Key     string
	Pattern int
}

// ref names one pattern of the index.
type ref struct {
	entry, pattern int
}

// byType indexes patterns by their exact detail-type values; anyType holds
// those that do not constrain detail-type to exact values.
type byType struct {
	exact   map[string][]ref
	anyType []ref
}

func (b *byType) add(p *Pattern, r ref) {
	types, ok := p.ExactValues("detail-type")
	if !ok {
		b.anyType = append(b.anyType, r)
		return
	}
	if b.exact == nil {
		b.exact = map[string][]ref{}
	}
	for _, t := range dedupe(types) {
		b.exact[t] = append(b.exact[t], r)
	}
}

// Index holds many patterns, indexed by source then detail-type, so an
// event is tested only against the patterns whose exact source and
// detail-type lists (if they have them) contain the event's. It is
// immutable once built and safe for concurrent use.
type Index struct {
	entries []Entry
	// bySource holds the patterns by each exact source they name,
	// bySourcePrefix by each source prefix; anySource the others.
	bySource       map[string]*byType
	bySourcePrefix map[string]*byType
	anySource      byType
	size           int
}

// NewIndex indexes entries. Their patterns are used as given (compiled
// once by the caller, typically once per job version).
func NewIndex(entries []Entry) *Index {
	ix := &Index{entries: entries, bySource: map[string]*byType{}, bySourcePrefix: map[string]*byType{}}
	for e, en := range entries {
		for i, p := range en.Patterns {
			if p == nil {
				continue
			}
			ix.size++
			r := ref{entry: e, pattern: i}
			sources, prefixes, ok := p.keys("source")
			if !ok {
				ix.anySource.add(p, r)
				continue
			}
			for _, s := range dedupe(sources) {
				bucket(ix.bySource, s).add(p, r)
			}
			for _, s := range dedupe(prefixes) {
				bucket(ix.bySourcePrefix, s).add(p, r)
			}
		}
	}
	return ix
}

func bucket(m map[string]*byType, key string) *byType {
	b := m[key]
	if b == nil {
		b = &byType{}
		m[key] = b
	}
	return b
}

func dedupe(list []string) []string {
	if len(list) < 2 {
		return list
	}
	seen := make(map[string]bool, len(list))
	out := list[:0:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Len is the number of patterns indexed.
func (ix *Index) Len() int { return ix.size }

// Match returns the owners with a pattern matching event, each once with
// its first matching pattern, sorted by key.
func (ix *Index) Match(event map[string]any) []Hit {
	sources, detailTypes := keyValues(event["source"]), keyValues(event["detail-type"])
	// Few patterns match an event: a slice searched linearly beats a map.
	var found []Hit // Key unset until the end; Pattern; entry in owner
	var owners []int
	test := func(refs []ref) {
		for _, r := range refs {
			at := -1
			for k, e := range owners {
				if e == r.entry {
					at = k
					break
				}
			}
			if at >= 0 && found[at].Pattern <= r.pattern {
				continue
			}
			if !ix.entries[r.entry].Patterns[r.pattern].Match(event) {
				continue
			}
			if at >= 0 {
				found[at].Pattern = r.pattern
				continue
			}
			owners = append(owners, r.entry)
			found = append(found, Hit{Key: ix.entries[r.entry].Key, Pattern: r.pattern})
		}
	}
	visit := func(b *byType) {
		if b == nil {
			return
		}
		for _, t := range detailTypes {
			test(b.exact[t])
		}
		test(b.anyType)
	}
	for _, s := range sources {
		visit(ix.bySource[s])
		if len(ix.bySourcePrefix) > 0 {
			for n := 0; n <= len(s); n++ {
				visit(ix.bySourcePrefix[s[:n]])
			}
		}
	}
	visit(&ix.anySource)
	hits := found
	sort.Slice(hits, func(i, j int) bool { return hits[i].Key < hits[j].Key })
	return hits
}

// keyValues are the strings an exact pattern value can equal in v: v
// itself, or the strings of an array (a pattern matches an array when it
// matches any element).
func keyValues(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
