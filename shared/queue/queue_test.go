package queue_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/emulator"
	"github.com/runledger/runledger/shared/emulator/emulatortest"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/queue/queuetest"
)

var client *queue.Client

func TestMain(m *testing.M) {
	opts := emulator.Options{Services: []string{emulator.ServiceSQS}}
	emulatortest.MainWith(m, opts, func(env *emulator.Env) error {
		client = queue.New(env.SQSClient())
		return nil
	})
}

// Clock differences between this process and the emulator's (Date.now
// against Go's monotonic clock) stay well under this.
const clockSlack = 50 * time.Millisecond

// newQueue creates a fresh, uniquely named queue for one test and deletes
// it (and its dead-letter queue) afterwards.
func newQueue(t *testing.T, spec queue.Spec) queue.Created {
	t.Helper()
	return queuetest.New(t, client, spec)
}

// receiveWithin long-polls until at least one message arrives or within
// runs out.
func receiveWithin(t *testing.T, url string, opts queue.ReceiveOptions, within time.Duration) []queue.Message {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msgs, err := client.Receive(t.Context(), url, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			return msgs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message from %s within %s", queue.Name(url), within)
		}
	}
}

func requireCounts(t *testing.T, url string, want queue.Counts) {
	t.Helper()
	got, err := client.Counts(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("counts of %s = %+v, want %+v", queue.Name(url), got, want)
	}
}

func TestSendReceiveDelete(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{VisibilityTimeout: 30 * time.Second})
	attrs := map[string]string{"run_id": "r-1", "attempt": "3", "kind.dispatch": "ünïcode ✓"}
	sentAt := time.Now()
	id, err := client.Send(t.Context(), q.URL, `{"task":"extract"}`, attrs)
	if err != nil {
		t.Fatal(err)
	}
	requireCounts(t, q.URL, queue.Counts{Visible: 1})

	msgs := receiveWithin(t, q.URL, queue.ReceiveOptions{MaxMessages: 10, Wait: time.Second}, 10*time.Second)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.ID != id || m.Body != `{"task":"extract"}` || m.ReceiveCount != 1 || m.ReceiptHandle == "" {
		t.Fatalf("message = %+v, want id %s, the body, receive count 1 and a receipt handle", m, id)
	}
	if len(m.Attributes) != len(attrs) {
		t.Fatalf("attributes = %v, want %v", m.Attributes, attrs)
	}
	for k, v := range attrs {
		if m.Attributes[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, m.Attributes[k], v)
		}
	}
	if m.SentAt.Before(sentAt.Add(-time.Second)) || m.SentAt.After(time.Now().Add(time.Second)) {
		t.Errorf("sent at %s, want about %s", m.SentAt, sentAt)
	}
	requireCounts(t, q.URL, queue.Counts{InFlight: 1})

	if err := client.Delete(t.Context(), q.URL, m.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	requireCounts(t, q.URL, queue.Counts{})
}

func TestRedeliveryAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	const visibility = 2 * time.Second
	q := newQueue(t, queue.Spec{})
	if _, err := client.Send(t.Context(), q.URL, "redeliver me", nil); err != nil {
		t.Fatal(err)
	}

	beforeFirst := time.Now()
	first := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second, VisibilityTimeout: visibility}, 10*time.Second)[0]
	hidden, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hidden) != 0 && time.Since(beforeFirst) < visibility-clockSlack {
		t.Fatalf("message visible again %s after a receive with a %s visibility timeout", time.Since(beforeFirst), visibility)
	}

	second := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second, VisibilityTimeout: visibility}, 15*time.Second)[0]
	if elapsed := time.Since(beforeFirst); elapsed < visibility-clockSlack {
		t.Errorf("redelivered after %s, before the %s visibility timeout ran out", elapsed, visibility)
	}
	if second.ID != first.ID || second.Body != "redeliver me" || second.ReceiveCount != 2 {
		t.Errorf("redelivery = %+v, want message %s with receive count 2", second, first.ID)
	}
	if second.ReceiptHandle == first.ReceiptHandle {
		t.Errorf("redelivery reused the receipt handle %q", first.ReceiptHandle)
	}
	if err := client.Delete(t.Context(), q.URL, second.ReceiptHandle); err != nil {
		t.Fatal(err)
	}
	requireCounts(t, q.URL, queue.Counts{})
}

func TestDelayedDelivery(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	q := newQueue(t, queue.Spec{})
	beforeSend := time.Now()
	id, err := client.SendDelayed(t.Context(), q.URL, "later", map[string]string{"timer": "retry"}, delay)
	if err != nil {
		t.Fatal(err)
	}
	early, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	counts, err := client.Counts(t.Context(), q.URL)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(beforeSend) < delay-clockSlack {
		if len(early) != 0 {
			t.Fatalf("delayed message received after %s, before its %s delay", time.Since(beforeSend), delay)
		}
		if counts != (queue.Counts{Delayed: 1}) {
			t.Fatalf("counts during the delay = %+v, want one delayed", counts)
		}
	}

	m := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second}, 15*time.Second)[0]
	if elapsed := time.Since(beforeSend); elapsed < delay-clockSlack {
		t.Errorf("delayed message delivered after %s, want at least %s", elapsed, delay)
	}
	if m.ID != id || m.Body != "later" || m.Attributes["timer"] != "retry" || m.ReceiveCount != 1 {
		t.Errorf("message = %+v, want %s with its body and attribute, received once", m, id)
	}
}

func TestRedriveToDeadLetterQueue(t *testing.T) {
	t.Parallel()
	const maxReceives = 2
	q := newQueue(t, queue.Spec{VisibilityTimeout: time.Second, MaxReceiveCount: maxReceives, Encrypt: true})
	if q.DeadLetterURL == "" || q.DeadLetterARN == "" || q.ARN == "" {
		t.Fatalf("created = %+v, want queue and dead-letter queue with ARNs", q)
	}
	id, err := client.Send(t.Context(), q.URL, "poison", map[string]string{"attempt": "1"})
	if err != nil {
		t.Fatal(err)
	}

	// Receive without deleting, as a crashing consumer would.
	for n := 1; n <= maxReceives; n++ {
		m := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second}, 15*time.Second)[0]
		if m.ID != id || m.ReceiveCount != n {
			t.Fatalf("receive %d: message %s with receive count %d, want %s with %d", n, m.ID, m.ReceiveCount, id, n)
		}
	}

	// SQS moves the message when a receive would exceed maxReceiveCount;
	// keep receiving from the source until it shows up in the DLQ.
	deadline := time.Now().Add(15 * time.Second)
	for {
		msgs, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			t.Fatalf("message received a %d. time from the source queue, want it in the DLQ after %d", msgs[0].ReceiveCount, maxReceives)
		}
		dead, err := client.Receive(t.Context(), q.DeadLetterURL, queue.ReceiveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) > 0 {
			if dead[0].ID != id || dead[0].Body != "poison" || dead[0].Attributes["attempt"] != "1" {
				t.Fatalf("dead letter = %+v, want message %s with its body and attributes", dead[0], id)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("message not in the dead-letter queue 15s after its last receive")
		}
	}
	requireCounts(t, q.URL, queue.Counts{})
}

func TestChangeVisibility(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})

	t.Run("extend", func(t *testing.T) {
		t.Parallel()
		q := newQueue(t, queue.Spec{})
		if _, err := client.Send(t.Context(), q.URL, "slow work", nil); err != nil {
			t.Fatal(err)
		}
		m := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second, VisibilityTimeout: time.Second}, 10*time.Second)[0]
		if err := client.ChangeVisibility(t.Context(), q.URL, m.ReceiptHandle, time.Minute); err != nil {
			t.Fatal(err)
		}
		// Without the change the message would be back after one second.
		again, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{Wait: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Fatalf("message redelivered (count %d) despite the extended visibility", again[0].ReceiveCount)
		}
		if err := client.Delete(t.Context(), q.URL, m.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
		requireCounts(t, q.URL, queue.Counts{})
	})

	t.Run("release at once", func(t *testing.T) {
		t.Parallel()
		if _, err := client.Send(t.Context(), q.URL, "give it back", nil); err != nil {
			t.Fatal(err)
		}
		m := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second, VisibilityTimeout: time.Hour}, 10*time.Second)[0]
		if err := client.ChangeVisibility(t.Context(), q.URL, m.ReceiptHandle, 0); err != nil {
			t.Fatal(err)
		}
		back := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second}, 5*time.Second)[0]
		if back.ID != m.ID || back.ReceiveCount != 2 {
			t.Fatalf("after release got %s with count %d, want %s with count 2", back.ID, back.ReceiveCount, m.ID)
		}
		if err := client.Delete(t.Context(), q.URL, back.ReceiptHandle); err != nil {
			t.Fatal(err)
		}
		// The delivery is gone: its visibility can no longer change.
		err := client.ChangeVisibility(t.Context(), q.URL, back.ReceiptHandle, time.Minute)
		if !errors.Is(err, queue.ErrNotInFlight) && !errors.Is(err, queue.ErrReceiptInvalid) {
			t.Fatalf("change visibility of a deleted message: err = %v, want ErrNotInFlight or ErrReceiptInvalid", err)
		}
	})
}

// Every refused send is refused before a request: the queue stays empty.
func TestRefusedSendsLeaveQueueEmpty(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	big := strings.Repeat("x", queue.MaxPayloadBytes)
	tooMany := map[string]string{}
	for i := range queue.MaxAttributes + 1 {
		tooMany[string(rune('a'+i))] = "v"
	}
	tests := []struct {
		name  string
		body  string
		attrs map[string]string
		delay time.Duration
		want  error
	}{
		{"body one byte over", big + "x", nil, 0, queue.ErrPayloadTooLarge},
		{"attributes push it over", big[:queue.MaxPayloadBytes-10], map[string]string{"run_id": "r1"}, 0, queue.ErrPayloadTooLarge},
		{"multi-byte characters count as bytes", strings.Repeat("é", queue.MaxPayloadBytes/2+1), nil, 0, queue.ErrPayloadTooLarge},
		{"delayed and oversized", big + "x", nil, time.Minute, queue.ErrPayloadTooLarge},
		{"delay over 15 minutes", "late", nil, 15*time.Minute + time.Second, queue.ErrDelayTooLong},
		{"negative delay", "early", nil, -time.Second, queue.ErrInvalidArgument},
		{"empty body", "", nil, 0, queue.ErrInvalidMessage},
		{"control character", "nul\x00here", nil, 0, queue.ErrInvalidMessage},
		{"too many attributes", "x", tooMany, 0, queue.ErrInvalidMessage},
		{"reserved attribute name", "x", map[string]string{"AWS.trace": "1"}, 0, queue.ErrInvalidMessage},
		{"empty attribute value", "x", map[string]string{"run_id": ""}, 0, queue.ErrInvalidMessage},
	}
	for _, tt := range tests {
		var err error
		if tt.delay != 0 {
			_, err = client.SendDelayed(t.Context(), q.URL, tt.body, tt.attrs, tt.delay)
		} else {
			_, err = client.Send(t.Context(), q.URL, tt.body, tt.attrs)
		}
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
		if err != nil && !strings.Contains(err.Error(), queue.Name(q.URL)) {
			t.Errorf("%s: error %q does not name the queue", tt.name, err)
		}
	}
	requireCounts(t, q.URL, queue.Counts{})
	if msgs, err := client.Receive(t.Context(), q.URL, queue.ReceiveOptions{MaxMessages: 10}); err != nil || len(msgs) != 0 {
		t.Fatalf("receive after refused sends: %d messages, %v; want none", len(msgs), err)
	}

	// The limit is inclusive and counted as SQS counts it: the emulator,
	// which enforces the same MaximumMessageSize, accepts exactly the limit.
	attrs := map[string]string{"run_id": "r1"}
	exact := big[:queue.MaxPayloadBytes-queue.PayloadSize("", attrs)]
	if _, err := client.Send(t.Context(), q.URL, exact, attrs); err != nil {
		t.Fatalf("send of exactly %d bytes: %v", queue.MaxPayloadBytes, err)
	}
	m := receiveWithin(t, q.URL, queue.ReceiveOptions{Wait: time.Second}, 10*time.Second)[0]
	if len(m.Body) != len(exact) || m.Attributes["run_id"] != "r1" {
		t.Fatalf("received %d bytes and %v, want %d bytes and run_id r1", len(m.Body), m.Attributes, len(exact))
	}
}

func TestMissingQueue(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	name := queue.Name(q.URL) + "-missing"
	missing := strings.TrimSuffix(q.URL, queue.Name(q.URL)) + name
	checks := map[string]error{}
	_, checks["send"] = client.Send(t.Context(), missing, "x", nil)
	_, checks["receive"] = client.Receive(t.Context(), missing, queue.ReceiveOptions{})
	checks["delete"] = client.Delete(t.Context(), missing, "handle")
	_, checks["counts"] = client.Counts(t.Context(), missing)
	_, checks["url"] = client.URL(t.Context(), name)
	for op, err := range checks {
		if !errors.Is(err, queue.ErrQueueNotFound) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s on a missing queue: err = %v, want ErrQueueNotFound naming %s", op, err, name)
		}
	}
}

func TestCreateQueue(t *testing.T) {
	t.Parallel()
	spec := queue.Spec{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 3, Retention: time.Hour, Encrypt: true}
	q := newQueue(t, spec)
	if !q.Encrypted {
		t.Errorf("created = %+v, want encryption accepted by the emulator", q)
	}
	if !strings.HasSuffix(q.DeadLetterARN, ":"+queue.Name(q.DeadLetterURL)) || queue.Name(q.DeadLetterURL) != queue.Name(q.URL)+"-dlq" {
		t.Errorf("dead-letter queue %s (%s), want %s-dlq", q.DeadLetterURL, q.DeadLetterARN, queue.Name(q.URL))
	}
	url, err := client.URL(t.Context(), queue.Name(q.URL))
	if err != nil || url != q.URL {
		t.Errorf("URL(%s) = %q, %v; want %q", queue.Name(q.URL), url, err, q.URL)
	}

	// Same spec again: the same queue. Different attributes: refused.
	spec.Name = queue.Name(q.URL)
	again, err := client.CreateQueue(t.Context(), spec)
	if err != nil || again != q {
		t.Errorf("create again = %+v, %v; want %+v", again, err, q)
	}
	spec.VisibilityTimeout = 7 * time.Second
	if _, err := client.CreateQueue(t.Context(), spec); !errors.Is(err, queue.ErrQueueExists) {
		t.Errorf("create with another visibility timeout: err = %v, want ErrQueueExists", err)
	}

	for _, bad := range []queue.Spec{
		{Name: ""},
		{Name: "has space"},
		{Name: "ok", VisibilityTimeout: 13 * time.Hour},
		{Name: "ok", Retention: time.Second},
		{Name: strings.Repeat("n", 77)},
	} {
		if _, err := client.CreateQueue(t.Context(), bad); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("create %+v: err = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestReceiveOptionsOutOfRange(t *testing.T) {
	t.Parallel()
	q := newQueue(t, queue.Spec{})
	for _, opts := range []queue.ReceiveOptions{
		{MaxMessages: 11},
		{MaxMessages: -1},
		{Wait: 21 * time.Second},
		{VisibilityTimeout: 13 * time.Hour},
	} {
		if _, err := client.Receive(t.Context(), q.URL, opts); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("receive with %+v: err = %v, want ErrInvalidArgument", opts, err)
		}
	}
	if err := client.ChangeVisibility(t.Context(), q.URL, "handle", -time.Second); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("negative visibility: err = %v, want ErrInvalidArgument", err)
	}
}
