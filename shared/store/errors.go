package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/ledger"
)

// The DynamoDB store's own errors, beside the ledger's. Every error that
// leaves the package wraps one of these or of the ledger's (or a
// statemodel sentinel for a rejected event) together with the operation
// and the key it concerned; SDK errors never leave it bare.
var (
	// ErrTableNotFound: the table itself does not exist. It is also an
	// ErrNotFound.
	ErrTableNotFound = fmt.Errorf("table %w", ledger.ErrNotFound)
	// ErrTableLayout: an existing table has an index of this version's name
	// but another key schema or projection, which DynamoDB cannot change in
	// place (EnsureTable).
	ErrTableLayout = fault.New(fault.Conflict, "table layout differs from this version's")
)

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
			return fmt.Errorf("%w: %s", ledger.ErrThrottled, api.ErrorMessage())
		case "ValidationException":
			msg := api.ErrorMessage()
			if strings.Contains(msg, "Item size") || strings.Contains(msg, "item size") {
				// The pre-write size check should have caught it; this is
				// the backstop for items the store cannot size in advance
				// (an attempt's late events).
				return &ledger.ItemTooLargeError{Item: "item (reported by DynamoDB: " + msg + ")", Limit: ledger.MaxItemSize}
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
			return fmt.Errorf("%w: %v", ledger.ErrThrottled, err)
		case reasonValidation:
			if r.Message != nil && strings.Contains(strings.ToLower(*r.Message), "item size") {
				return &ledger.ItemTooLargeError{Item: "item (reported by DynamoDB: " + *r.Message + ")", Limit: ledger.MaxItemSize}
			}
		}
	}
	return translate(err)
}
