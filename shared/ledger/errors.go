package ledger

import (
	"errors"
	"fmt"
)

// The storage errors, declared once for every store: every error a store
// returns wraps one of these (or a statemodel sentinel for a rejected
// event) together with the operation and the key it concerned.
var (
	// ErrNotFound: the item (job, run, instance) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a create met an item with the same key.
	ErrAlreadyExists = errors.New("already exists")
	// ErrUnfinishedRuns: a job with unfinished runs is not deleted
	// (DeleteJobIfIdle).
	ErrUnfinishedRuns = errors.New("job has unfinished runs")
	// ErrVersionConflict: a compare-and-set on a version (job, run) met
	// another version.
	ErrVersionConflict = errors.New("version conflict")
	// ErrConflict: a conditional write met a state other than the one it
	// was decided from (an instance moved on, a job's next fire changed).
	// Transition never returns it for an instance: it re-reads and
	// classifies instead.
	ErrConflict = errors.New("conflict")
	// ErrUnsettled: Transition re-read and re-decided MaxRounds times and
	// every write met a newer state. Transient: the caller may try again.
	ErrUnsettled = errors.New("transition did not settle")
	// ErrSlotTaken: the job's slot already has a run (ExistingRunError).
	ErrSlotTaken = errors.New("slot already has a run")
	// ErrIdempotentReplay: the idempotency key was used before with the same
	// body hash; the existing run is the answer (ExistingRunError).
	ErrIdempotentReplay = errors.New("idempotency key already used")
	// ErrIdempotencyMismatch: the idempotency key was used before with a
	// different body hash (ExistingRunError).
	ErrIdempotencyMismatch = errors.New("idempotency key used with another body")
	// ErrTooManyTasks: a run has more tasks than one transaction can create
	// (MaxTasksPerRun).
	ErrTooManyTasks = errors.New("too many tasks for one run")
	// ErrItemTooLarge: an item (or a whole transaction) exceeds DynamoDB's
	// size limit (ItemTooLargeError). Nothing was written.
	ErrItemTooLarge = errors.New("item too large")
	// ErrInvalidKey: a key part is empty, too long or contains the key
	// separator (InvalidKeyError). Nothing was written.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidPageToken: a paging token that the store did not issue
	// for this listing. Permanent: retrying the same token fails again.
	ErrInvalidPageToken = errors.New("invalid next token")
	// ErrInvalidInput: an argument the store cannot write (no tasks, a
	// heartbeat without a lease duration, ...).
	ErrInvalidInput = errors.New("invalid input")
	// ErrThrottled: the database refused the request for capacity or request
	// rate. Transient.
	ErrThrottled = errors.New("throttled")
	// ErrCorruptItem: a stored item does not decode. Never expected.
	ErrCorruptItem = errors.New("corrupt item")
)

// ExistingRunError names the run that already holds a slot or an idempotency
// key. Err is ErrSlotTaken, ErrIdempotentReplay or ErrIdempotencyMismatch.
type ExistingRunError struct {
	Job      string
	RunID    string
	BodyHash string // idempotency keys: the hash stored with the key
	Err      error
}

func (e *ExistingRunError) Error() string {
	return fmt.Sprintf("%v: job %s, run %s", e.Err, e.Job, e.RunID)
}

func (e *ExistingRunError) Unwrap() error { return e.Err }

// ItemTooLargeError says which item is too large and by how much. Size is
// computed by DynamoDB's documented rules (the DynamoDB store's itemSize).
type ItemTooLargeError struct {
	Item  string // the item's kind and key, or "transaction"
	Size  int    // bytes
	Limit int
}

func (e *ItemTooLargeError) Error() string {
	return fmt.Sprintf("%v: %s is %d bytes, the limit is %d", ErrItemTooLarge, e.Item, e.Size, e.Limit)
}

func (e *ItemTooLargeError) Unwrap() error { return ErrItemTooLarge }

// InvalidKeyError says which key part is unusable and why.
type InvalidKeyError struct {
	Part   string // "job", "run", "task", "event id", "pk", "sk", ...
	Value  string // truncated to 64 bytes
	Reason string
}

func (e *InvalidKeyError) Error() string {
	return fmt.Sprintf("%v: %s %q %s", ErrInvalidKey, e.Part, e.Value, e.Reason)
}

func (e *InvalidKeyError) Unwrap() error { return ErrInvalidKey }
