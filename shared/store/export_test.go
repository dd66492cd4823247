package store

// ItemSize exposes the size rules to the external tests, which check them
// against the endpoint's own limit.
var ItemSize = itemSize
