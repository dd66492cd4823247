package tableschema

import "testing"

func TestAttributesAreUniqueAndCoverEveryKey(t *testing.T) {
	s := Table()
	attrs := s.Attributes()
	byName := map[string]AttributeType{}
	for _, a := range attrs {
		if _, dup := byName[a.Name]; dup {
			t.Fatalf("attribute %q listed twice", a.Name)
		}
		byName[a.Name] = a.Type
	}
	keys := []Attribute{s.PartitionKey, s.SortKey}
	for _, ix := range s.Indexes {
		keys = append(keys, ix.PartitionKey, ix.SortKey)
	}
	for _, k := range keys {
		if byName[k.Name] != k.Type {
			t.Errorf("key %q: defined as %q, want %q", k.Name, byName[k.Name], k.Type)
		}
	}
	if len(attrs) != 8 {
		t.Errorf("got %d attribute definitions, want 8", len(attrs))
	}
}

func TestShardName(t *testing.T) {
	if got := ShardName(3); got != "T#03" {
		t.Fatalf("ShardName(3) = %q", got)
	}
}
