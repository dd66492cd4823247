package statemodel

import (
	"crypto/sha256"
	"encoding/base64"
)

// A stored record keeps an event id of at most MaxPlainEventID characters
// as sent (a worker's ULID or UUID scoped by its route and attempt,
// "complete:1:<id>", is at most 47), so the history shows the id a caller
// sent, and a longer one as its digest: '#' and the first 12 bytes of its SHA-256 in base64url, 17
// characters. '#' is in no id a client may send ([A-Za-z0-9._-]) nor in
// the scheduler's own, so a digest never equals an id as sent, and 96 bits
// make two ids of one instance with one digest too unlikely to matter.
const (
	MaxPlainEventID = 64
	digestBytes     = 12
)

// EventDigest is id as a record stores it: id itself when short, else its
// digest.
func EventDigest(id string) string {
	if len(id) <= MaxPlainEventID {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + base64.RawURLEncoding.EncodeToString(sum[:digestBytes])
}

// SameEvent reports whether stored, an event id as a record or a snapshot
// holds it (as sent, or its digest), is the event id.
func SameEvent(stored, id string) bool {
	return stored != "" && (stored == id || stored == EventDigest(id))
}
