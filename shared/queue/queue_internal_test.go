package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

func TestTranslate(t *testing.T) {
	t.Parallel()
	msg := "The specified queue does not exist."
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"typed not found", &types.QueueDoesNotExist{Message: &msg}, ErrQueueNotFound},
		{"query-protocol not found", &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue"}, ErrQueueNotFound},
		{"typed receipt", &types.ReceiptHandleIsInvalid{}, ErrReceiptInvalid},
		{"not in flight", &types.MessageNotInflight{}, ErrNotInFlight},
		{"bad contents", &types.InvalidMessageContents{}, ErrInvalidMessage},
		{"name exists", &types.QueueNameExists{}, ErrQueueExists},
		{"too long from the server", &smithy.GenericAPIError{Code: "InvalidParameterValue",
			Message: "One or more parameters are invalid. Reason: Message must be shorter than 262144 bytes."}, ErrPayloadTooLarge},
		{"other parameter", &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Value 99 for parameter WaitTimeSeconds is invalid."}, ErrRequestFailed},
		{"throttled", &types.RequestThrottled{}, ErrRequestFailed},
		{"network", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), ErrRequestFailed},
		{"canceled", fmt.Errorf("operation error SQS: SendMessage: %w", context.Canceled), context.Canceled},
		{"deadline", fmt.Errorf("operation error SQS: ReceiveMessage: %w", context.DeadlineExceeded), context.DeadlineExceeded},
	}
	for _, tt := range tests {
		got := translate(tt.err)
		if !errors.Is(got, tt.want) {
			t.Errorf("%s: translate = %v, want %v", tt.name, got, tt.want)
		}
		// The SDK's error types stay inside the adapter.
		var api smithy.APIError
		if errors.As(got, &api) {
			t.Errorf("%s: translated error still carries the SDK error %T", tt.name, api)
		}
	}
	if got := translate(&types.QueueDoesNotExist{Message: &msg}); !strings.Contains(got.Error(), msg) {
		t.Errorf("translate dropped the server's message: %v", got)
	}
}

func TestPayloadSizeAndValidate(t *testing.T) {
	t.Parallel()
	if got := PayloadSize("héllo", map[string]string{"run_id": "r1", "a": ""}); got != 6+(6+6+2)+(1+6+0) {
		t.Errorf("PayloadSize = %d, want bytes of body + names + \"String\" + values = 33", got)
	}
	tests := []struct {
		name  string
		body  string
		attrs map[string]string
		want  error
	}{
		{"plain", "ok", map[string]string{"run_id": "r1", "a.b-c_d": "v"}, nil},
		{"tab newline return", "a\tb\nc\rd", nil, nil},
		{"emoji (beyond the BMP)", "done 🎉", nil, nil},
		{"replacement character itself", "\uFFFD", nil, nil},
		{"invalid UTF-8", "bad \xff byte", nil, ErrInvalidMessage},
		{"escape character", "\x1b[31m", nil, ErrInvalidMessage},
		{"U+FFFE", "\uFFFE", nil, ErrInvalidMessage},
		{"empty body", "", nil, ErrInvalidMessage},
		{"leading period", "x", map[string]string{".a": "v"}, ErrInvalidMessage},
		{"trailing period", "x", map[string]string{"a.": "v"}, ErrInvalidMessage},
		{"doubled period", "x", map[string]string{"a..b": "v"}, ErrInvalidMessage},
		{"amazon prefix any case", "x", map[string]string{"AMAZON.x": "v"}, ErrInvalidMessage},
		{"space in name", "x", map[string]string{"run id": "v"}, ErrInvalidMessage},
		{"name too long", "x", map[string]string{strings.Repeat("n", 257): "v"}, ErrInvalidMessage},
		{"bad character in value", "x", map[string]string{"a": "\x00"}, ErrInvalidMessage},
		{"at the limit", strings.Repeat("x", MaxPayloadBytes), nil, nil},
		{"over the limit", strings.Repeat("x", MaxPayloadBytes+1), nil, ErrPayloadTooLarge},
	}
	for _, tt := range tests {
		err := ValidateMessage(tt.body, tt.attrs)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: ValidateMessage = %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestSecondsRoundsUp(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]int32{
		0: 0, time.Nanosecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 899*time.Second + 1: 900, MaxDelay: 900,
	} {
		if got := seconds(d); got != want {
			t.Errorf("seconds(%s) = %d, want %d", d, got, want)
		}
	}
}

func TestName(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://sqs.eu-west-1.amazonaws.com/123456789012/runledger-events": "runledger-events",
		"http://sqs.us-east-1.localhost:4566/000000000000/pool-default-dlq": "pool-default-dlq",
		"not a url": "not a url",
	} {
		if got := Name(url); got != want {
			t.Errorf("Name(%q) = %q, want %q", url, got, want)
		}
	}
}
