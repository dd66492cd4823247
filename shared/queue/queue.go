// Package queue is the SQS adapter: send (now or delayed), receive with long
// polling and a visibility timeout, delete, change visibility, create queues
// with a dead-letter queue, and read approximate counts.
//
// The exported API speaks the project's types only; SDK errors are
// translated at this boundary into the errors in errors.go, wrapped with
// the operation and the queue name. Inputs SQS would reject (oversized
// payloads, delays over 15 minutes, bad characters) are refused before any
// request, so a refused send never leaves a message behind.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS limits the adapter enforces before a request.
const (
	// MaxPayloadBytes bounds the body plus, for every message attribute,
	// its name, its data type ("String") and its value, in UTF-8 bytes.
	// SQS now accepts up to 1 MiB, but Lambda's SQS trigger and this
	// project keep to the classic 256 KiB so one limit holds everywhere;
	// queues created here carry it as MaximumMessageSize.
	MaxPayloadBytes = 262_144
	// MaxDelay is the longest per-message delay SQS accepts.
	MaxDelay = 15 * time.Minute
	// MaxAttributes is the number of message attributes SQS accepts.
	MaxAttributes = 10
	// MaxReceiveMessages is the most messages one receive returns.
	MaxReceiveMessages = 10
	// MaxWait is the longest long-polling wait of one receive.
	MaxWait = 20 * time.Second
	// MaxVisibilityTimeout is the longest visibility timeout SQS accepts.
	MaxVisibilityTimeout = 12 * time.Hour
)

// Message is one delivery of a message.
type Message struct {
	ID string
	// ReceiptHandle identifies this delivery for Delete and
	// ChangeVisibility; a later delivery of the same message gets a new one.
	ReceiptHandle string
	Body          string
	Attributes    map[string]string
	// ReceiveCount is SQS's approximate receive count, this delivery included.
	ReceiveCount int
	// SentAt is when SQS accepted the message (whole milliseconds).
	SentAt time.Time
}

// ReceiveOptions shape one receive. Durations are rounded up to whole
// seconds, SQS's unit.
type ReceiveOptions struct {
	// MaxMessages is 1..MaxReceiveMessages; zero means 1.
	MaxMessages int
	// Wait is the long-polling wait, 0..MaxWait: the receive returns as soon
	// as a message is available or when the wait ends.
	Wait time.Duration
	// VisibilityTimeout hides the received messages from other receivers,
	// up to MaxVisibilityTimeout. Zero means the queue's own timeout.
	VisibilityTimeout time.Duration
}

// Client sends to and receives from SQS queues named by URL.
type Client struct {
	api *sqs.Client
}

// New wraps an SQS client (see emulator.Env.SQSClient for the local one).
func New(api *sqs.Client) *Client {
	return &Client{api: api}
}

// Send sends body with string message attributes and returns the message id.
func (c *Client) Send(ctx context.Context, queueURL, body string, attrs map[string]string) (string, error) {
	return c.send(ctx, "send", queueURL, body, attrs, 0)
}

// SendDelayed sends a message that stays invisible for delay (0..MaxDelay,
// rounded up to whole seconds so it never shows early).
func (c *Client) SendDelayed(ctx context.Context, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error) {
	return c.send(ctx, "send delayed", queueURL, body, attrs, delay)
}

func (c *Client) send(ctx context.Context, op, queueURL, body string, attrs map[string]string, delay time.Duration) (string, error) {
	q := Name(queueURL)
	if err := validateSend(body, attrs, delay); err != nil {
		return "", fmt.Errorf("%s to %s: %w", op, q, err)
	}
	out, err := c.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:          aws.String(queueURL),
		MessageBody:       aws.String(body),
		DelaySeconds:      seconds(delay),
		MessageAttributes: messageAttributes(attrs),
	})
	if err != nil {
		return "", fmt.Errorf("%s to %s: %w", op, q, translate(err))
	}
	return aws.ToString(out.MessageId), nil
}

// validateSend refuses what SQS would refuse of one message, before any
// request.
func validateSend(body string, attrs map[string]string, delay time.Duration) error {
	switch {
	case delay < 0:
		return fmt.Errorf("delay %s: %w: negative", delay, ErrInvalidArgument)
	case delay > MaxDelay:
		return fmt.Errorf("delay %s: %w", delay, ErrDelayTooLong)
	}
	return ValidateMessage(body, attrs)
}

// messageAttributes are string message attributes as SQS takes them (nil
// for none).
func messageAttributes(attrs map[string]string) map[string]types.MessageAttributeValue {
	if len(attrs) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(attrs))
	for k, v := range attrs {
		out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	return out
}

// PayloadSize is the size SQS counts against MaxPayloadBytes.
func PayloadSize(body string, attrs map[string]string) int {
	n := len(body)
	for k, v := range attrs {
		n += len(k) + len("String") + len(v)
	}
	return n
}

// ValidateMessage checks what SQS would refuse: an empty body, characters
// outside SQS's set, more than MaxAttributes attributes, bad attribute names
// or empty values (ErrInvalidMessage), and a payload over MaxPayloadBytes
// (ErrPayloadTooLarge).
func ValidateMessage(body string, attrs map[string]string) error {
	if size := PayloadSize(body, attrs); size > MaxPayloadBytes {
		return fmt.Errorf("%d bytes: %w", size, ErrPayloadTooLarge)
	}
	if body == "" {
		return fmt.Errorf("%w: empty body", ErrInvalidMessage)
	}
	if i := invalidChar(body); i >= 0 {
		return fmt.Errorf("%w: body has a character SQS rejects at byte %d", ErrInvalidMessage, i)
	}
	if len(attrs) > MaxAttributes {
		return fmt.Errorf("%w: %d message attributes, at most %d", ErrInvalidMessage, len(attrs), MaxAttributes)
	}
	for k, v := range attrs {
		if err := validAttributeName(k); err != nil {
			return fmt.Errorf("%w: attribute name %q: %v", ErrInvalidMessage, k, err)
		}
		if v == "" {
			return fmt.Errorf("%w: attribute %q has an empty value", ErrInvalidMessage, k)
		}
		if i := invalidChar(v); i >= 0 {
			return fmt.Errorf("%w: attribute %q has a character SQS rejects at byte %d", ErrInvalidMessage, k, i)
		}
	}
	return nil
}

// invalidChar returns the byte offset of the first character outside
// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF, or -1.
func invalidChar(s string) int {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validRuneError(s[i:]):
			return i
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return i
		}
	}
	return -1
}

// validRuneError tells an encoded U+FFFD (allowed) from invalid UTF-8.
func validRuneError(s string) bool {
	r, size := utf8.DecodeRuneInString(s)
	return r == utf8.RuneError && size == 3
}

// validAttributeName applies SQS's rules: 1..256 of A-Z a-z 0-9 _ - .,
// no leading, trailing or doubled period, no AWS. or Amazon. prefix.
func validAttributeName(name string) error {
	if name == "" || len(name) > 256 {
		return fmt.Errorf("length %d, want 1..256", len(name))
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-' || ch == '.'
		if !ok {
			return fmt.Errorf("character %q not allowed", ch)
		}
		if ch == '.' && (i == 0 || i == len(name)-1 || name[i-1] == '.') {
			return fmt.Errorf("leading, trailing or doubled period")
		}
	}
	if hasPrefixFold(name, "aws.") || hasPrefixFold(name, "amazon.") {
		return fmt.Errorf("reserved prefix")
	}
	return nil
}

func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		a := s[i]
		if a >= 'A' && a <= 'Z' {
			a += 'a' - 'A'
		}
		if a != prefix[i] {
			return false
		}
	}
	return true
}

// Receive returns up to opts.MaxMessages messages, waiting up to opts.Wait
// for the first one. An empty result is not an error.
func (c *Client) Receive(ctx context.Context, queueURL string, opts ReceiveOptions) ([]Message, error) {
	q := Name(queueURL)
	maxMessages := opts.MaxMessages
	if maxMessages == 0 {
		maxMessages = 1
	}
	switch {
	case maxMessages < 0 || maxMessages > MaxReceiveMessages:
		return nil, fmt.Errorf("receive from %s: max messages %d: %w: want 1..%d", q, maxMessages, ErrInvalidArgument, MaxReceiveMessages)
	case opts.Wait < 0 || opts.Wait > MaxWait:
		return nil, fmt.Errorf("receive from %s: wait %s: %w: want 0..%s", q, opts.Wait, ErrInvalidArgument, MaxWait)
	case opts.VisibilityTimeout < 0 || opts.VisibilityTimeout > MaxVisibilityTimeout:
		return nil, fmt.Errorf("receive from %s: visibility timeout %s: %w: want 0..%s", q, opts.VisibilityTimeout, ErrInvalidArgument, MaxVisibilityTimeout)
	}
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(queueURL),
		MaxNumberOfMessages:         int32(maxMessages),
		WaitTimeSeconds:             seconds(opts.Wait),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameSentTimestamp},
	}
	if opts.VisibilityTimeout > 0 {
		in.VisibilityTimeout = seconds(opts.VisibilityTimeout)
	}
	out, err := c.api.ReceiveMessage(ctx, in)
	if err != nil {
		return nil, fmt.Errorf("receive from %s: %w", q, translate(err))
	}
	msgs := make([]Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		msg := Message{
			ID:            aws.ToString(m.MessageId),
			ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body:          aws.ToString(m.Body),
		}
		if len(m.MessageAttributes) > 0 {
			msg.Attributes = make(map[string]string, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				if v.StringValue != nil {
					msg.Attributes[k] = *v.StringValue
				}
			}
		}
		if n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
			msg.ReceiveCount = n
		}
		if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
			msg.SentAt = time.UnixMilli(ms)
		}
		msgs = append(msgs, msg)
	}
	return msgs, nil
}

// Delete removes the message of this delivery. Deleting with the handle of
// a delivery that has already been deleted succeeds, as in SQS.
func (c *Client) Delete(ctx context.Context, queueURL, receiptHandle string) error {
	_, err := c.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receiptHandle)})
	if err != nil {
		return fmt.Errorf("delete from %s: %w", Name(queueURL), translate(err))
	}
	return nil
}

// ChangeVisibility sets how long this delivery stays hidden, counted from
// now (0..MaxVisibilityTimeout, rounded up to whole seconds). Zero makes the
// message visible to receivers at once.
func (c *Client) ChangeVisibility(ctx context.Context, queueURL, receiptHandle string, timeout time.Duration) error {
	q := Name(queueURL)
	if timeout < 0 || timeout > MaxVisibilityTimeout {
		return fmt.Errorf("change visibility in %s: timeout %s: %w: want 0..%s", q, timeout, ErrInvalidArgument, MaxVisibilityTimeout)
	}
	_, err := c.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(queueURL),
		ReceiptHandle:     aws.String(receiptHandle),
		VisibilityTimeout: seconds(timeout),
	})
	if err != nil {
		return fmt.Errorf("change visibility in %s: %w", q, translate(err))
	}
	return nil
}

// Counts are SQS's approximate message counts of a queue.
type Counts struct {
	Visible  int // available to receive
	InFlight int // received, neither deleted nor returned by a timeout
	Delayed  int // sent with a delay that has not yet run out
}

// Total is every message the queue holds.
func (c Counts) Total() int { return c.Visible + c.InFlight + c.Delayed }

// Counts reads the queue's approximate message counts.
func (c *Client) Counts(ctx context.Context, queueURL string) (Counts, error) {
	q := Name(queueURL)
	out, err := c.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return Counts{}, fmt.Errorf("count messages in %s: %w", q, translate(err))
	}
	var counts Counts
	for name, dst := range map[types.QueueAttributeName]*int{
		types.QueueAttributeNameApproximateNumberOfMessages:           &counts.Visible,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible: &counts.InFlight,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed:    &counts.Delayed,
	} {
		v, ok := out.Attributes[string(name)]
		if !ok {
			return Counts{}, fmt.Errorf("count messages in %s: %w: attribute %s missing from the answer", q, ErrRequestFailed, name)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return Counts{}, fmt.Errorf("count messages in %s: %w: attribute %s = %q", q, ErrRequestFailed, name, v)
		}
		*dst = n
	}
	return counts, nil
}

// Spec describes a queue to create.
type Spec struct {
	Name string
	// VisibilityTimeout is the queue's default; zero means SQS's 30 s.
	VisibilityTimeout time.Duration
	// MaxReceiveCount > 0 creates a dead-letter queue named Name+"-dlq" and
	// moves a message there once it has been received that many times
	// without being deleted.
	MaxReceiveCount int
	// Retention is how long SQS keeps a message (60 s..14 days); zero means
	// SQS's 4 days. The dead-letter queue always keeps 14 days.
	Retention time.Duration
	// Encrypt asks for SQS-managed server-side encryption. An endpoint
	// that does not know the attribute gets the queue without it; Created
	// tells which.
	Encrypt bool
}

// Created names a queue made by CreateQueue.
type Created struct {
	URL, ARN string
	// DeadLetterURL and DeadLetterARN are empty without a dead-letter queue.
	DeadLetterURL, DeadLetterARN string
	// Encrypted reports that the endpoint accepted server-side encryption.
	Encrypted bool
}

const maxRetention = 14 * 24 * time.Hour

// CreateQueue creates the queue and, with MaxReceiveCount, its dead-letter
// queue and redrive policy. Creating a queue that exists with the same
// attributes returns it; with other attributes it fails with ErrQueueExists.
func (c *Client) CreateQueue(ctx context.Context, spec Spec) (Created, error) {
	if err := spec.validate(); err != nil {
		return Created{}, fmt.Errorf("create queue %s: %w", spec.Name, err)
	}
	attrs := map[string]string{"MaximumMessageSize": strconv.Itoa(MaxPayloadBytes)}
	if spec.VisibilityTimeout > 0 {
		attrs["VisibilityTimeout"] = strconv.Itoa(int(seconds(spec.VisibilityTimeout)))
	}
	if spec.Retention > 0 {
		attrs["MessageRetentionPeriod"] = strconv.Itoa(int(seconds(spec.Retention)))
	}
	var created Created
	if spec.MaxReceiveCount > 0 {
		dlqAttrs := map[string]string{
			"MaximumMessageSize":     strconv.Itoa(MaxPayloadBytes),
			"MessageRetentionPeriod": strconv.Itoa(int(maxRetention / time.Second)),
		}
		dlqName := spec.Name + "-dlq"
		url, arn, encrypted, err := c.create(ctx, dlqName, dlqAttrs, spec.Encrypt)
		if err != nil {
			return Created{}, fmt.Errorf("create queue %s: dead-letter queue %s: %w", spec.Name, dlqName, err)
		}
		created.DeadLetterURL, created.DeadLetterARN = url, arn
		policy, err := json.Marshal(map[string]string{
			"deadLetterTargetArn": arn,
			"maxReceiveCount":     strconv.Itoa(spec.MaxReceiveCount),
		})
		if err != nil {
			return Created{}, fmt.Errorf("create queue %s: redrive policy: %w", spec.Name, err)
		}
		attrs["RedrivePolicy"] = string(policy)
		if !encrypted {
			spec.Encrypt = false // the endpoint said no once; do not ask again
		}
	}
	url, arn, encrypted, err := c.create(ctx, spec.Name, attrs, spec.Encrypt)
	if err != nil {
		return Created{}, fmt.Errorf("create queue %s: %w", spec.Name, err)
	}
	created.URL, created.ARN, created.Encrypted = url, arn, encrypted
	return created, nil
}

func (s Spec) validate() error {
	switch {
	case s.Name == "" || len(s.Name) > 80-len("-dlq"):
		return fmt.Errorf("%w: name length %d, want 1..76 (the dead-letter queue adds -dlq)", ErrInvalidArgument, len(s.Name))
	case s.VisibilityTimeout < 0 || s.VisibilityTimeout > MaxVisibilityTimeout:
		return fmt.Errorf("%w: visibility timeout %s, want 0..%s", ErrInvalidArgument, s.VisibilityTimeout, MaxVisibilityTimeout)
	case s.MaxReceiveCount < 0 || s.MaxReceiveCount > 1000:
		return fmt.Errorf("%w: max receive count %d, want 0..1000", ErrInvalidArgument, s.MaxReceiveCount)
	case s.Retention != 0 && (s.Retention < time.Minute || s.Retention > maxRetention):
		return fmt.Errorf("%w: retention %s, want 60s..%s", ErrInvalidArgument, s.Retention, maxRetention)
	}
	for i := 0; i < len(s.Name); i++ {
		ch := s.Name[i]
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			return fmt.Errorf("%w: name has %q; SQS allows A-Z a-z 0-9 _ - (no FIFO queues here)", ErrInvalidArgument, ch)
		}
	}
	return nil
}

// create makes one queue and reads back its ARN. With encrypt it asks for
// SQS-managed encryption first and, if the endpoint rejects the attribute,
// creates the queue without it.
func (c *Client) create(ctx context.Context, name string, attrs map[string]string, encrypt bool) (url, arn string, encrypted bool, err error) {
	if encrypt {
		withSSE := make(map[string]string, len(attrs)+1)
		for k, v := range attrs {
			withSSE[k] = v
		}
		withSSE["SqsManagedSseEnabled"] = "true"
		out, err := c.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: withSSE})
		switch {
		case err == nil:
			url, encrypted = aws.ToString(out.QueueUrl), true
		case isAttributeRejected(err):
			// Fall through to a queue without encryption.
		default:
			return "", "", false, translate(err)
		}
	}
	if url == "" {
		out, err := c.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
		if err != nil {
			return "", "", false, translate(err)
		}
		url = aws.ToString(out.QueueUrl)
	}
	got, err := c.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", false, fmt.Errorf("read ARN: %w", translate(err))
	}
	arn = got.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", "", false, fmt.Errorf("read ARN: %w: QueueArn missing from the answer", ErrRequestFailed)
	}
	return url, arn, encrypted, nil
}

func isAttributeRejected(err error) bool {
	var name *types.InvalidAttributeName
	var value *types.InvalidAttributeValue
	return errors.As(err, &name) || errors.As(err, &value)
}

// DeleteQueue deletes the queue (not its dead-letter queue).
func (c *Client) DeleteQueue(ctx context.Context, queueURL string) error {
	if _, err := c.api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)}); err != nil {
		return fmt.Errorf("delete queue %s: %w", Name(queueURL), translate(err))
	}
	return nil
}

// URL looks up the URL of the queue called name.
func (c *Client) URL(ctx context.Context, name string) (string, error) {
	out, err := c.api.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return "", fmt.Errorf("look up queue %s: %w", name, translate(err))
	}
	return aws.ToString(out.QueueUrl), nil
}

// Name is the queue name in a queue URL (its last path element).
func Name(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil || u.Path == "" {
		return queueURL
	}
	return path.Base(u.Path)
}

// seconds rounds d up to whole seconds, SQS's unit, so a delay or a
// visibility timeout is never shorter than asked.
func seconds(d time.Duration) int32 {
	return int32(math.Ceil(d.Seconds()))
}
