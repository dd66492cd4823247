// Package queuetest gives tests a fresh queue of their own.
package queuetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/runledger/runledger/shared/queue"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// New creates a uniquely named queue (named after the test) with client and
// deletes it, and its dead-letter queue, when the test ends.
func New(t testing.TB, client *queue.Client, spec queue.Spec) queue.Created {
	t.Helper()
	base := unsafeName.ReplaceAllString(t.Name(), "-")
	if len(base) > 50 {
		base = base[len(base)-50:]
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	spec.Name = strings.Trim(base, "-") + "-" + hex.EncodeToString(suffix[:])
	created, err := client.CreateQueue(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := client.DeleteQueue(ctx, created.URL); err != nil {
			t.Error(err)
		}
		if created.DeadLetterURL != "" {
			if err := client.DeleteQueue(ctx, created.DeadLetterURL); err != nil {
				t.Error(err)
			}
		}
	})
	return created
}
