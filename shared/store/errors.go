package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The store's errors. Every error that leaves the package wraps one of these
// (or a statemodel sentinel for a rejected event) together with the
// operation and the key it concerned; SDK errors never leave it bare.
var (
	// ErrNotFound: the item (job, run, instance) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrTableNotFound: the table itself does not exist. It is also an
	// ErrNotFound.
	ErrTableNotFound = fmt.Errorf("table %w", ErrNotFound)
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
	// ErrInvalidToken: a paging token that this store did not issue for
	// this listing.
	ErrInvalidToken = errors.New("invalid next token")
	// ErrInvalidInput: an argument the store cannot write (no tasks, a
	// heartbeat without a lease duration, ...).
	ErrInvalidInput = errors.New("invalid input")
	// ErrThrottled: DynamoDB refused the request for capacity or request
	// rate. Transient.
	ErrThrottled = errors.New("throttled")
	// ErrCorruptItem: a stored item does not decode. Never expected.
	ErrCorruptItem = errors.New("corrupt item")
	// ErrTableLayout: an existing table has an index of this version's name
	// but another key schema or projection, which DynamoDB cannot change in
	// place (EnsureTable).
	ErrTableLayout = errors.New("table layout differs from this version's")
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
// computed by DynamoDB's documented rules (see itemSize).
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

// translate maps an SDK error to the store's errors. Conditional-check and
// transaction cancellations are handled by each operation, which knows what
// its conditions mean; translate covers what every operation shares.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var rnf *types.ResourceNotFoundException
	if errors.As(err, &rnf) {
		return fmt.Errorf("%w: %s", ErrTableNotFound, orNone(rnf.ErrorMessage()))
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "RequestLimitExceeded", "ThrottlingException":
			return fmt.Errorf("%w: %s", ErrThrottled, api.ErrorMessage())
		case "ValidationException":
			msg := api.ErrorMessage()
			if strings.Contains(msg, "Item size") || strings.Contains(msg, "item size") {
				// The pre-write size check should have caught it; this is
				// the backstop for items the store cannot size in advance
				// (an attempt's late events).
				return &ItemTooLargeError{Item: "item (reported by DynamoDB: " + msg + ")", Limit: MaxItemSize}
			}
		}
	}
	return err
}

func orNone(s string) string {
	if s == "" {
		return "no message"
	}
	return s
}

// cancellation returns the per-item reasons of a cancelled transaction, or
// nil when err is something else.
func cancellation(err error) []types.CancellationReason {
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		return tce.CancellationReasons
	}
	return nil
}

// Cancellation reason codes DynamoDB reports per transaction item.
const (
	reasonNone        = "None"
	reasonCondition   = "ConditionalCheckFailed"
	reasonConflict    = "TransactionConflict"
	reasonThrottled   = "ThrottlingError"
	reasonCapacity    = "ProvisionedThroughputExceeded"
	reasonValidation  = "ValidationError"
	reasonSizeLimited = "ItemCollectionSizeLimitExceeded"
)

func reasonCode(r types.CancellationReason) string {
	if r.Code == nil {
		return ""
	}
	return *r.Code
}

// transient reports whether a cancelled transaction failed only because of
// other in-flight transactions or capacity, not because of a condition.
func transientCancel(reasons []types.CancellationReason) bool {
	seen := false
	for _, r := range reasons {
		switch reasonCode(r) {
		case reasonConflict, reasonThrottled, reasonCapacity:
			seen = true
		case reasonNone, "":
		default:
			return false
		}
	}
	return seen
}

// conditionFailed reports whether reason i is a failed condition.
func conditionFailed(reasons []types.CancellationReason, i int) bool {
	return i >= 0 && i < len(reasons) && reasonCode(reasons[i]) == reasonCondition
}

// cancelError turns a cancelled transaction that no operation-specific rule
// explained into a store error.
func cancelError(err error, reasons []types.CancellationReason) error {
	for _, r := range reasons {
		switch reasonCode(r) {
		case reasonThrottled, reasonCapacity:
			return fmt.Errorf("%w: %v", ErrThrottled, err)
		case reasonValidation:
			if r.Message != nil && strings.Contains(strings.ToLower(*r.Message), "item size") {
				return &ItemTooLargeError{Item: "item (reported by DynamoDB: " + *r.Message + ")", Limit: MaxItemSize}
			}
		}
	}
	return translate(err)
}
