package ledger

import (
	"fmt"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/protocol"
)

// msgInvalidRequest answers a name, id, token or argument the store
// cannot use.
const msgInvalidRequest = "A name, id or token in the request is not valid."

// The storage errors, declared once for every store: every error a store
// returns wraps one of these (or a statemodel sentinel for a rejected
// event) together with the operation and the key it concerned. Each has
// its class (package fault); those the API answers with a code of their
// own carry it and the sentence (protocol.NewError), the rest it answers
// 500 internal.
var (
	// ErrNotFound: the item (job, run, instance) does not exist.
	ErrNotFound = protocol.NewError(protocol.CodeNotFound, "not found", "The resource does not exist.")
	// ErrAlreadyExists: a create met an item with the same key.
	ErrAlreadyExists = protocol.NewError(protocol.CodeConflict, "already exists", "It exists already.")
	// ErrUnfinishedRuns: a job with unfinished runs is not deleted
	// (DeleteJobIfIdle).
	ErrUnfinishedRuns = fault.New(fault.Conflict, "job has unfinished runs")
	// ErrVersionConflict: a compare-and-set on a version (job, run) met
	// another version.
	ErrVersionConflict = protocol.NewError(protocol.CodeVersionConflict, "version conflict", "The job changed since that version; read it again.")
	// ErrConflict: a conditional write met a state other than the one it
	// was decided from (an instance moved on, a job's next fire changed).
	// Transition never returns it for an instance: it re-reads and
	// classifies instead.
	ErrConflict = fault.New(fault.Conflict, "conflict")
	// ErrUnsettled: Transition re-read and re-decided MaxRounds times and
	// every write met a newer state. Transient: the caller may try again.
	ErrUnsettled = fault.New(fault.Unavailable, "transition did not settle")
	// ErrSlotTaken: the job's slot already has a run (ExistingRunError).
	ErrSlotTaken = fault.New(fault.Conflict, "slot already has a run")
	// ErrIdempotentReplay: the idempotency key was used before with the same
	// body hash; the existing run is the answer (ExistingRunError).
	ErrIdempotentReplay = fault.New(fault.Conflict, "idempotency key already used")
	// ErrIdempotencyMismatch: the idempotency key was used before with a
	// different body hash (ExistingRunError).
	ErrIdempotencyMismatch = protocol.NewError(protocol.CodeConflict, "idempotency key used with another body", "This Idempotency-Key was used with another body.")
	// ErrTooManyTasks: a run has more tasks than one transaction can create
	// (MaxTasksPerRun).
	ErrTooManyTasks = protocol.NewError(protocol.CodeInvalidField, "too many tasks for one run", fmt.Sprintf("A run has at most %d tasks.", MaxTasksPerRun))
	// ErrItemTooLarge: an item (or a whole transaction) exceeds DynamoDB's
	// size limit (ItemTooLargeError). Nothing was written.
	ErrItemTooLarge = protocol.NewError(protocol.CodePayloadTooLarge, "item too large", "The item would be over DynamoDB's 400 KB limit.")
	// ErrInvalidKey: a key part is empty, too long or contains the key
	// separator (InvalidKeyError). Nothing was written.
	ErrInvalidKey = protocol.NewError(protocol.CodeInvalidField, "invalid key", msgInvalidRequest)
	// ErrInvalidPageToken: a paging token that the store did not issue
	// for this listing. Permanent: retrying the same token fails again.
	ErrInvalidPageToken = protocol.NewError(protocol.CodeInvalidField, "invalid next token", msgInvalidRequest)
	// ErrInvalidInput: an argument the store cannot write (no tasks, a
	// heartbeat without a lease duration, ...).
	ErrInvalidInput = protocol.NewError(protocol.CodeInvalidField, "invalid input", msgInvalidRequest)
	// ErrThrottled: the database refused the request for capacity or request
	// rate. Transient.
	ErrThrottled = fault.New(fault.Throttled, "throttled")
	// ErrCorruptItem: a stored item does not decode. Never expected.
	ErrCorruptItem = fault.New(fault.Internal, "corrupt item")
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
