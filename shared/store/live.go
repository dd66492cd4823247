package store

import (
	"reflect"

	"github.com/runledger/runledger/shared/tableschema"
)

// liveIndex is the live index's definition.
func liveIndex() tableschema.Index {
	for _, ix := range tableschema.Table().Indexes {
		if ix.Name == tableschema.LiveIndex {
			return ix
		}
	}
	panic("tableschema defines no " + tableschema.LiveIndex + " index")
}

// liveEntry is an item's entry in the live index: the table's keys, the
// index's keys and the attributes it projects, the ones queryLiveShard
// reads; nil when the item is not in the index.
func liveEntry(it item) item {
	if it[tableschema.LivePK] == nil || it[tableschema.LiveSK] == nil {
		return nil
	}
	ix := liveIndex()
	e := item{}
	for _, a := range append([]string{tableschema.PK, tableschema.SK, ix.PartitionKey.Name, ix.SortKey.Name}, ix.NonKeyAttributes...) {
		if v := it[a]; v != nil {
			e[a] = v
		}
	}
	return e
}

// liveIndexWrites lists the sizes of the live index entry writes that
// writing item next over item old causes: an entry that appears or
// disappears is one write, one whose keys or projected attributes change
// one write, one that stays as it was none. A run's projected attributes
// are set at its creation, so its entry is written when the run is
// created (or reopened) and when it ends, and no write between touches it.
func liveIndexWrites(old, next item) []int {
	o, n := liveEntry(old), liveEntry(next)
	switch {
	case o == nil && n == nil:
		return nil
	case n == nil:
		return []int{itemSize(o)}
	case reflect.DeepEqual(o, n):
		return nil
	}
	return []int{itemSize(n)}
}
