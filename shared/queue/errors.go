package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/runledger/runledger/shared/fault"
)

// Errors returned by the adapter, wrapped with the operation and the queue
// name. Test with errors.Is; each has its class (package fault). The
// SDK's own errors never leave the package.
var (
	// ErrPayloadTooLarge: body plus message attributes exceed MaxPayloadBytes.
	// Checked before any request, so nothing was sent.
	ErrPayloadTooLarge = fault.New(fault.TooLarge, "payload exceeds the SQS limit of 262,144 bytes")
	// ErrDelayTooLong: a send delay above MaxDelay. Nothing was sent.
	ErrDelayTooLong = fault.New(fault.Invalid, "delay exceeds the SQS limit of 15 minutes")
	// ErrInvalidMessage: an empty body, characters SQS rejects, or bad
	// message attributes. Nothing was sent.
	ErrInvalidMessage = fault.New(fault.Invalid, "invalid message")
	// ErrInvalidArgument: an option outside the range SQS accepts (a negative
	// delay, more than 10 messages, a wait over 20 s, a visibility timeout
	// over 12 h, an empty queue name).
	ErrInvalidArgument = fault.New(fault.Invalid, "invalid argument")
	// ErrQueueNotFound: the queue does not exist.
	ErrQueueNotFound = fault.New(fault.NotFound, "queue does not exist")
	// ErrQueueExists: a queue of that name exists with other attributes.
	ErrQueueExists = fault.New(fault.Conflict, "queue exists with different attributes")
	// ErrReceiptInvalid: the receipt handle is malformed, or belongs to a
	// delivery that has been superseded by a later receive or deleted.
	ErrReceiptInvalid = fault.New(fault.Invalid, "receipt handle is invalid")
	// ErrNotInFlight: the message is no longer in flight (its visibility
	// timeout ran out or it was deleted), so its visibility cannot change.
	ErrNotInFlight = fault.New(fault.Conflict, "message is not in flight")
	// ErrRequestFailed: any other failure of the request (network,
	// throttling, permissions, server errors). Usually worth a retry.
	ErrRequestFailed = fault.New(fault.Unavailable, "sqs request failed")
)

// translate maps an SDK error onto the package's errors. The server's
// message is kept as text; the SDK error itself is not wrapped.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return context.Canceled
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	var (
		notFound     *types.QueueDoesNotExist
		badReceipt   *types.ReceiptHandleIsInvalid
		notInflight  *types.MessageNotInflight
		badContents  *types.InvalidMessageContents
		nameExists   *types.QueueNameExists
		badAttrName  *types.InvalidAttributeName
		badAttrValue *types.InvalidAttributeValue
	)
	switch {
	case errors.As(err, &notFound):
		return detail(ErrQueueNotFound, notFound)
	case errors.As(err, &badReceipt):
		return detail(ErrReceiptInvalid, badReceipt)
	case errors.As(err, &notInflight):
		return detail(ErrNotInFlight, notInflight)
	case errors.As(err, &badContents):
		return detail(ErrInvalidMessage, badContents)
	case errors.As(err, &nameExists):
		return detail(ErrQueueExists, nameExists)
	case errors.As(err, &badAttrName):
		return detail(ErrInvalidArgument, badAttrName)
	case errors.As(err, &badAttrValue):
		return detail(ErrInvalidArgument, badAttrValue)
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		// Endpoints speaking the older query protocol, or emulators, may
		// answer with codes the typed errors above do not match.
		if sentinel := fromCode(api.ErrorCode(), api.ErrorMessage()); sentinel != nil {
			return withMessage(sentinel, api.ErrorMessage())
		}
	}
	return fmt.Errorf("%w: %v", ErrRequestFailed, err)
}

// fromCode maps an SQS error code and its message onto the package's
// errors, or nil for a code without one of its own. Whole requests
// (translate) and the entries of a batch (entryError) answer with the same
// codes.
func fromCode(code, message string) error {
	code = strings.TrimPrefix(code, "AWS.SimpleQueueService.")
	msg := strings.ToLower(message)
	switch {
	case code == "NonExistentQueue" || code == "QueueDoesNotExist":
		return ErrQueueNotFound
	case code == "ReceiptHandleIsInvalid":
		return ErrReceiptInvalid
	case code == "MessageNotInflight":
		return ErrNotInFlight
	case code == "QueueNameExists" || code == "QueueAlreadyExists":
		return ErrQueueExists
	case code == "InvalidMessageContents":
		return ErrInvalidMessage
	case code == "InvalidParameterValue" && strings.Contains(msg, "message must be shorter than"):
		return ErrPayloadTooLarge
	case code == "InvalidParameterValue" && strings.Contains(msg, "receipt handle"):
		return ErrReceiptInvalid
	}
	return nil
}

// entryError is the error of one failed entry of a batch answer.
func entryError(code, message string) error {
	if sentinel := fromCode(code, message); sentinel != nil {
		return withMessage(sentinel, message)
	}
	return fmt.Errorf("%w: %s: %s", ErrRequestFailed, code, message)
}

func detail(sentinel error, api smithy.APIError) error {
	return withMessage(sentinel, api.ErrorMessage())
}

func withMessage(sentinel error, msg string) error {
	if msg != "" {
		return fmt.Errorf("%w: %s", sentinel, msg)
	}
	return sentinel
}
