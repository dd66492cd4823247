package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/statemodel"
)

// addMaps puts each map task's counts into its answer, and, once it
// succeeded, its output (one read of its output item).
func (h *Handler) addMaps(ctx context.Context, v ledger.RunView, tasks []protocol.Task) error {
	for i := range tasks {
		m, ok := v.Maps[tasks[i].Task]
		if !ok {
			continue
		}
		tasks[i].Map = &protocol.MapCounts{
			Total: m.Total, Pending: m.Pending(), Running: m.Running,
			Succeeded: m.Succeeded, Failed: m.Failed, Cancelled: m.Cancelled,
		}
		if tasks[i].State != statemodel.StateSucceeded {
			continue
		}
		out, truncated, err := h.svc.Maps().Output(ctx, v.Run.ID, tasks[i].Task)
		if errors.Is(err, ledger.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		tasks[i].Output, tasks[i].OutputTruncated = out, truncated
	}
	return nil
}

// children pages a map task's children in index order.
func (h *Handler) children(w http.ResponseWriter, r *http.Request) error {
	limit, err := queryLimit(r, 100, 1000)
	if err != nil {
		return err
	}
	insts, next, err := h.svc.Maps().Children(r.Context(), r.PathValue("run"), r.PathValue("task"), limit, r.URL.Query().Get("next_token"))
	if err != nil {
		return err
	}
	page := protocol.ChildrenPage{Children: make([]protocol.Task, len(insts)), NextToken: next}
	for i, inst := range insts {
		page.Children[i] = renderTask(ledger.TaskView{Instance: inst})
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}
