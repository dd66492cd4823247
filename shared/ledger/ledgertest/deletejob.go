package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/runledger/runledger/shared/ledger"
)

// deleteJobIfIdle: a job with an unfinished run is not deleted, and keeps
// taking runs; one without is deleted, and takes none after. A run created
// while the job is being deleted either is found by the delete (which
// answers ErrUnfinishedRuns) or fails in its creating write: never a run
// of a deleted job.
func deleteJobIfIdle(t *testing.T, h *Harness) {
	ctx := context.Background()
	ofJob := func(job string) ledger.NewRun {
		nr := NewRun(job, "main")
		nr.OfLiveJob = true
		return nr
	}
	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "busy"}); err != nil {
		t.Fatal(err)
	}
	h.MustCreate(t, ofJob("busy"))
	if err := h.Store.DeleteJobIfIdle(ctx, "busy"); !errors.Is(err, ledger.ErrUnfinishedRuns) {
		t.Fatalf("delete a job with an unfinished run: %v, want ErrUnfinishedRuns", err)
	}
	if _, err := h.Store.GetJob(ctx, "busy"); err != nil {
		t.Fatalf("the refused delete removed the job: %v", err)
	}
	h.MustCreate(t, ofJob("busy")) // the refused delete left no mark

	if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: "idle"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.DeleteJobIfIdle(ctx, "idle"); err != nil {
		t.Fatalf("delete an idle job: %v", err)
	}
	if _, err := h.Store.GetJob(ctx, "idle"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := h.CreateRun(ctx, ofJob("idle"), h.Clock.Now()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a run of a deleted job: %v, want ErrNotFound", err)
	}
	if err := h.Store.DeleteJobIfIdle(ctx, "idle"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}

	deleted, refused := 0, 0
	for round := range 12 {
		job := fmt.Sprintf("race-%d", round)
		if _, err := h.Store.CreateJob(ctx, ledger.Job{Name: job}); err != nil {
			t.Fatal(err)
		}
		nr := ofJob(job)
		errs := Race(2, func(i int) error {
			if i == 0 {
				return h.Store.DeleteJobIfIdle(ctx, job)
			}
			_, err := h.CreateRun(ctx, nr, h.Clock.Now())
			return err
		})
		delErr, runErr := errs[0], errs[1]
		switch {
		case delErr == nil && runErr == nil:
			t.Fatalf("round %d: the job was deleted and its run %s created", round, nr.ID)
		case delErr == nil:
			if !errors.Is(runErr, ledger.ErrNotFound) {
				t.Fatalf("round %d: the run of the deleted job failed with %v, want ErrNotFound", round, runErr)
			}
			if _, err := h.Store.ReadRun(ctx, nr.ID); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("round %d: the refused run reads %v", round, err)
			}
			deleted++
		case runErr == nil:
			if !errors.Is(delErr, ledger.ErrUnfinishedRuns) {
				t.Fatalf("round %d: the delete failed with %v, want ErrUnfinishedRuns", round, delErr)
			}
			if _, err := h.Store.GetJob(ctx, job); err != nil {
				t.Fatalf("round %d: the job of a created run: %v", round, err)
			}
			refused++
		default:
			t.Fatalf("round %d: both failed: delete %v, run %v", round, delErr, runErr)
		}
	}
	t.Logf("%d rounds deleted the job first, %d created the run first", deleted, refused)
}
