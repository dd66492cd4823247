package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock and timer source the test moves by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	armed   int // timers made so far
	waiters []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed++
	ch := make(chan time.Time, 1)
	c.waiters = append(c.waiters, fakeTimer{at: c.now.Add(d), ch: ch})
	return ch
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// waitArmed waits until the code under test has made n timers: it is then
// blocked on the clock, and what it does next is up to Advance.
func (c *fakeClock) waitArmed(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		armed := c.armed
		c.mu.Unlock()
		if armed >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d timers armed, want %d", armed, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFenceMargin(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name      string
		interval  time.Duration
		expiresAt time.Time // the API's lease_expires_at
		want      time.Time
	}{
		{"short timeout: margin a third of it", time.Second, t0.Add(3 * time.Second), t0.Add(2 * time.Second)},
		{"long timeout: margin 5 s", 20 * time.Second, t0.Add(time.Minute), t0.Add(55 * time.Second)},
		{"the API's lease ends first", 20 * time.Second, t0.Add(30 * time.Second), t0.Add(25 * time.Second)},
		// A worker clock behind the API's: the lease cannot end later
		// than a heartbeat timeout after the call was sent.
		{"the sent time bounds a late answer", 20 * time.Second, t0.Add(time.Hour), t0.Add(55 * time.Second)},
		{"an answer without a lease", time.Second, time.Time{}, t0.Add(2 * time.Second)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newLeaseFence(func() time.Time { return t0 }, tc.interval)
			f.renew(t0, tc.expiresAt)
			if got := f.deadline(); !got.Equal(tc.want) {
				t.Errorf("deadline %s after the renewal, want %s", got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

// The fence fires once the deadline passes without a renewal, and a
// renewal moves it on; the clock and the timers are the test's.
func TestFenceWatchOnFakeClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &fakeClock{now: t0}
	f := newLeaseFence(c.Now, time.Second) // timeout 3 s, margin 1 s
	f.renew(t0, t0.Add(3*time.Second))

	fired := make(chan time.Time, 1)
	go func() {
		if f.watch(t.Context(), c.After) {
			fired <- c.Now()
		}
		close(fired)
	}()
	c.waitArmed(t, 1)
	c.Advance(1900 * time.Millisecond) // 1.1 s of lease left: more than the margin
	select {
	case at := <-fired:
		t.Fatalf("fence fired at +%s, before its deadline +2s", at.Sub(t0))
	default:
	}
	// A heartbeat at +1.9 s renews the lease until +4.9 s.
	f.renew(t0.Add(1900*time.Millisecond), t0.Add(4900*time.Millisecond))
	c.waitArmed(t, 2)
	c.Advance(1900 * time.Millisecond) // +3.8 s: 1.1 s left
	c.waitArmed(t, 2)
	select {
	case at := <-fired:
		t.Fatalf("fence fired at +%s, before the renewed deadline +3.9s", at.Sub(t0))
	default:
	}
	c.Advance(100 * time.Millisecond) // +3.9 s: the margin is all that is left
	at, ok := <-fired
	if !ok {
		t.Fatal("watch returned without firing")
	}
	if want := t0.Add(3900 * time.Millisecond); !at.Equal(want) {
		t.Errorf("fence fired at +%s, want +3.9s", at.Sub(t0))
	}
}

func TestFenceWatchStopsWithCtx(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &fakeClock{now: t0}
	f := newLeaseFence(c.Now, time.Second)
	f.renew(t0, t0.Add(3*time.Second))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan bool, 1)
	go func() { done <- f.watch(ctx, c.After) }()
	c.waitArmed(t, 1)
	cancel()
	if <-done {
		t.Error("watch reported the lease lost after its ctx ended")
	}
}

func TestSummarizeRedactsTokens(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	cases := []string{
		`{"run":"r1","task":"main","attempt":1,"token":"` + secret + `","pool":"default"`,
		`{"token" : "` + secret + `"}`,
		`{"token":"` + secret, // cut off
		`{"run":"r1","token":"` + strings.Repeat("x", 20) + `\"` + secret + `"}`,
		`Authorization: Bearer ` + secret,
		`not json at all, token follows: "token":"` + secret + `" and more ` + strings.Repeat("y", 300),
	}
	for _, body := range cases {
		got := summarize([]byte(body))
		if strings.Contains(got, secret[:8]) {
			t.Errorf("summarize(%q) = %q: the token shows", body, got)
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("summarize(%q) = %q: no redaction mark", body, got)
		}
	}
	if got := summarize([]byte(`{"run":"r1"}`)); got != `{"run":"r1"}` {
		t.Errorf("summarize changed a body without a token: %q", got)
	}
}
