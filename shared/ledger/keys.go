package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// DynamoDB's key limits: a partition key value is at most 2048 bytes and a
// sort key value at most 1024 bytes (UTF-8), and neither may be empty.
const (
	MaxPartitionKeyBytes = 2048
	MaxSortKeyBytes      = 1024
)

// keySep separates the parts of a key. Names, run ids and task ids must not
// contain it, or "TASK#a" and "TASK#a#ATT#001" could belong to different
// tasks; event ids and idempotency keys may, because they end their key.
const KeySep = "#"

// InstanceKey names one task instance.
type InstanceKey struct {
	Run  string
	Task string
}

func (k InstanceKey) String() string { return k.Run + "/" + k.Task }

// checkName validates a key part that other key parts follow (job, run,
// task): not empty, valid UTF-8, without the separator, and short enough
// that every key built from it fits. maxBytes leaves room for the prefixes
// and suffixes of the longest key the part appears in.
func CheckName(part, v string, maxBytes int) error {
	switch {
	case v == "":
		return &InvalidKeyError{Part: part, Reason: "is empty"}
	case !utf8.ValidString(v):
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: "is not valid UTF-8"}
	case strings.Contains(v, KeySep):
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: "contains the key separator " + strconv.Quote(KeySep)}
	case len(v) > maxBytes:
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: fmt.Sprintf("is %d bytes, at most %d", len(v), maxBytes)}
	}
	return nil
}

// checkTail validates a key part that ends its key (event id, idempotency
// key): not empty, valid UTF-8, and the whole key within DynamoDB's limit.
func CheckTail(part, v string, fullKey string, limit int) error {
	switch {
	case v == "":
		return &InvalidKeyError{Part: part, Reason: "is empty"}
	case !utf8.ValidString(v):
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: "is not valid UTF-8"}
	case len(fullKey) > limit:
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: fmt.Sprintf("makes a %d-byte key, at most %d", len(fullKey), limit)}
	}
	return nil
}

// Name limits, from the tightest key each name appears in: a job name is
// also the listing index's sort key (list_sk, at most 1024 bytes); a run id
// is the pointer sort key "RUN#<run>"; a task id appears in the sort keys
// "TR#<task>#<10 digits>" and "TASK#<task>#ATT#nnn".
const (
	MaxJobNameBytes = MaxSortKeyBytes
	MaxRunIDBytes   = MaxSortKeyBytes - len("RUN#")
	MaxTaskIDBytes  = 1000
)

func checkJob(job string) error { return CheckName("job", job, MaxJobNameBytes) }

func checkRun(run string) error { return CheckName("run", run, MaxRunIDBytes) }

func checkTask(task string) error { return CheckName("task", task, MaxTaskIDBytes) }

func checkInstanceKey(k InstanceKey) error {
	if err := checkRun(k.Run); err != nil {
		return err
	}
	return checkTask(k.Task)
}

// MaxEventIDBytes bounds an event id, which the instance item keeps in its
// recent ids and history records.
const MaxEventIDBytes = 512

func checkEventID(_ InstanceKey, id string) error {
	return CheckTail("event id", id, id, MaxEventIDBytes)
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// TimeLayout is fixed-width RFC 3339 UTC: every stored time sorts as text,
// which the timers index and the lease condition rely on.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// FormatTime formats t in TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }
