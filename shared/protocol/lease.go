package protocol

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/runledger/runledger/shared/wire"
)

// LeaseKind is the "kind" of a worker lease message on the events queue. A
// message without "kind" is a completion.
const LeaseKind = "worker_lease"

// Lease is a worker process's lease message on the events queue: evidence
// for the reconciler of which attempts a process still runs. A process
// sends one at start, then periodically, and a last one with ExpiresAt =
// now when it shuts down gracefully. An attempt claimed by
// "<Worker>@<BootID>" that a live lease of that boot no longer lists, or
// whose boot's leases have expired, is gone.
type Lease struct {
	// Worker is the configured name; the claims' worker id is
	// Worker + "@" + BootID.
	Worker string
	// BootID is random per process start: a ULID whose time is the start
	// (BootStart), so the scheduler can tell the newer of two boots.
	BootID string
	// ExpiresAt: without a newer lease of the same boot by then, the
	// process is dead.
	ExpiresAt time.Time
	// Running lists the attempts the process runs or is still reporting,
	// each with its proof (LeaseProof): the scheduler counts only the
	// attempts whose proof it can check against the attempt's stored token
	// hash and whose claim this boot made.
	Running []LeasedAttempt
	// Seq increases with every lease of one boot, so a consumer can ignore
	// a lease that SQS delivers after a newer one (an extension of the
	// contract's shape).
	Seq int64
	// SentAt is the worker clock when the lease was made (an extension);
	// zero when absent.
	SentAt time.Time
}

// LeasedAttempt is an attempt a lease lists, with the proof that the
// lease's sender holds the attempt's token.
type LeasedAttempt struct {
	AttemptRef
	// Proof is LeaseProof of the attempt in its lease, in hex.
	Proof string `json:"proof,omitempty"`
}

// HashToken is how an attempt token is kept by the scheduler: its SHA-256,
// in hex. The token itself is never stored.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenMatches reports whether token is the one whose stored hash is hash
// (HashToken), comparing in constant time, so a forger learns nothing
// from how long a refusal took. An empty token or hash matches nothing.
func TokenMatches(token, hash string) bool {
	if token == "" || hash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(HashToken(token)), []byte(hash)) == 1
}

// LeaseProof proves that the sender of lease l holds the token of
// attempt a: HMAC-SHA256 keyed by the token's hash (HashToken, the text
// the scheduler stores on the attempt record, so it checks the proof
// without the token), over the lease's worker, boot id, seq, expires_at
// and sent_at (as the wire carries them) and the attempt, each
// length-prefixed. Neither the proof nor the lease tells the token, and a
// proof proves nothing for another attempt or another lease.
func LeaseProof(tokenHash string, l Lease, a AttemptRef) string {
	mac := hmac.New(sha256.New, []byte(tokenHash))
	field := func(v string) { fmt.Fprintf(mac, "%d:%s", len(v), v) }
	field(LeaseKind)
	field(l.Worker)
	field(l.BootID)
	field(strconv.FormatInt(l.Seq, 10))
	field(optionalTime(l.ExpiresAt))
	field(optionalTime(l.SentAt))
	field(a.Run)
	field(a.Task)
	field(strconv.Itoa(a.Attempt))
	return hex.EncodeToString(mac.Sum(nil))
}

// CheckLeaseProof reports whether proof is LeaseProof(tokenHash, l, a),
// in constant time.
func CheckLeaseProof(tokenHash string, l Lease, a AttemptRef, proof string) bool {
	if tokenHash == "" || proof == "" {
		return false
	}
	return hmac.Equal([]byte(LeaseProof(tokenHash, l, a)), []byte(proof))
}

// Prove fills in the proof of every listed attempt from its token
// (tokens[i] is Running[i]'s); the lease's other fields must be final.
func (l *Lease) Prove(tokens []string) {
	for i := range l.Running {
		l.Running[i].Proof = LeaseProof(HashToken(tokens[i]), *l, l.Running[i].AttemptRef)
	}
}

func optionalTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return FormatTime(t)
}

// WorkerID is the id the process's claims carry.
func (l Lease) WorkerID() string { return l.Worker + "@" + l.BootID }

// BootStart is the start time a boot id carries. The SDK's boot ids are
// ULIDs made when the process starts, so their time part is that start by
// the worker's clock (to the millisecond); ok is false for an id of
// another form.
func BootStart(bootID string) (time.Time, bool) {
	id, err := ulid.ParseStrict(bootID)
	if err != nil {
		return time.Time{}, false
	}
	return ulid.Time(id.Time()).UTC(), true
}

type leaseJSON struct {
	Kind      string          `json:"kind"`
	Worker    string          `json:"worker"`
	BootID    string          `json:"boot_id"`
	ExpiresAt *string         `json:"expires_at"`
	Running   []LeasedAttempt `json:"running"`
	Seq       int64           `json:"seq,omitempty"`
	SentAt    *string         `json:"sent_at,omitempty"`
}

// MarshalJSON writes the lease with "kind": "worker_lease".
func (l Lease) MarshalJSON() ([]byte, error) {
	running := l.Running
	if running == nil {
		running = []LeasedAttempt{}
	}
	return wire.Marshal(leaseJSON{
		Kind: LeaseKind, Worker: l.Worker, BootID: l.BootID, ExpiresAt: NullTime(l.ExpiresAt),
		Running: running, Seq: l.Seq, SentAt: NullTime(l.SentAt),
	})
}

// UnmarshalJSON reads a lease and refuses any other kind of message.
func (l *Lease) UnmarshalJSON(b []byte) error {
	var w leaseJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Kind != LeaseKind {
		return malformed("kind", fmt.Sprintf("kind %q is not %q.", w.Kind, LeaseKind))
	}
	expires, err := parseOptionalTime("expires_at", w.ExpiresAt)
	if err != nil {
		return err
	}
	sent, err := parseOptionalTime("sent_at", w.SentAt)
	if err != nil {
		return err
	}
	*l = Lease{Worker: w.Worker, BootID: w.BootID, ExpiresAt: expires, Running: w.Running, Seq: w.Seq, SentAt: sent}
	return nil
}

// Validate checks what the scheduler needs of a lease: the worker's name,
// its boot id and the expiry.
func (l Lease) Validate() error {
	switch {
	case l.Worker == "":
		return malformed("worker", "worker is required.")
	case l.BootID == "":
		return malformed("boot_id", "boot_id is required.")
	case l.ExpiresAt.IsZero():
		return malformed("expires_at", "expires_at is required.")
	}
	return nil
}
