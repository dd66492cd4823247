package store

// WithMapsInRunPartition makes the store create maps as it did before
// their children had partitions of their own (children and count shards
// under RUN#<run>, no child_parts), so tests can write that layout and
// check that it still reads, runs on and ends.
func WithMapsInRunPartition() Option { return func(s *Store) { s.layouts.fresh = 0 } }
