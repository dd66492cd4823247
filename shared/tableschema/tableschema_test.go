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

// TestIndexLayouts: index names are unique across live and retired
// indexes, an INCLUDE projection names what it copies, and every retired
// index is replaced by a live one.
func TestIndexLayouts(t *testing.T) {
	s := Table()
	names := map[string]bool{}
	replaced := map[string]bool{}
	for _, ix := range append(append([]Index{}, s.Indexes...), s.Retired...) {
		if names[ix.Name] {
			t.Errorf("index %q defined twice", ix.Name)
		}
		names[ix.Name] = true
		switch ix.Projection {
		case ProjectAll, ProjectKeysOnly:
			if len(ix.NonKeyAttributes) > 0 {
				t.Errorf("index %q projects all attributes and lists %v", ix.Name, ix.NonKeyAttributes)
			}
		case ProjectInclude:
			if len(ix.NonKeyAttributes) == 0 {
				t.Errorf("index %q includes no attribute", ix.Name)
			}
		default:
			t.Errorf("index %q: projection %q", ix.Name, ix.Projection)
		}
		if ix.Replaces != "" {
			replaced[ix.Replaces] = true
		}
	}
	for _, ix := range s.Retired {
		if !replaced[ix.Name] {
			t.Errorf("retired index %q is replaced by no index", ix.Name)
		}
	}
}
