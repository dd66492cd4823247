package store

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/tableschema"
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
const keySep = "#"

// Key prefixes and fixed sort keys (docs: notes/store.md layout).
const (
	prefixJob        = "JOB#"
	prefixRun        = "RUN#"
	prefixTask       = "TASK#"
	prefixSlot       = "SLOT#"
	prefixIdem       = "IDEM#"
	prefixTransition = "TR#"
	prefixDependent  = "DEP#"
	attemptInfix     = "#ATT#"
	skJob            = "JOB"
	skRun            = "RUN"
	listJobs         = "JOBS"
	listRuns         = "RUNS"
)

// timeLayout is fixed-width RFC 3339 UTC: every stored time sorts as text,
// which the timers index and the lease condition rely on.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) { return time.Parse(timeLayout, s) }

// InstanceKey names one task instance.
type InstanceKey struct {
	Run  string
	Task string
}

func (k InstanceKey) String() string { return k.Run + "/" + k.Task }

func jobPK(job string) string       { return prefixJob + job }
func runPK(run string) string       { return prefixRun + run }
func instanceSK(task string) string { return prefixTask + task }
func attemptSK(task string, n int) string {
	return fmt.Sprintf("%s%s%s%03d", prefixTask, task, attemptInfix, n)
}
func transitionSK(task string, seq int64) string {
	return fmt.Sprintf("%s%s%s%010d", prefixTransition, task, keySep, seq)
}
func transitionPrefix(task string) string { return prefixTransition + task + keySep }
func slotSK(logical time.Time) string     { return prefixSlot + formatTime(logical) }
func idemSK(key string) string            { return prefixIdem + key }
func pointerSK(run string) string         { return prefixRun + run }
func dependentSK(job string) string       { return prefixDependent + job }
func keyOf(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{tableschema.PK: str(pk), tableschema.SK: str(sk)}
}

// timerShard spreads timers over tableschema.TimerShards partitions by a
// stable hash of the item's key, so an item keeps its shard for life. SHA-256
// rather than FNV: FNV's low bits barely mix for keys that differ only at
// the end, and ids that share a prefix are the rule (ULIDs).
func timerShard(pk, sk string) string {
	h := sha256.New()
	h.Write([]byte(pk))
	h.Write([]byte{0})
	h.Write([]byte(sk))
	sum := h.Sum(nil)
	return tableschema.ShardName(int(binary.BigEndian.Uint32(sum[:4]) % tableschema.TimerShards))
}

// checkName validates a key part that other key parts follow (job, run,
// task): not empty, valid UTF-8, without the separator, and short enough
// that every key built from it fits. maxBytes leaves room for the prefixes
// and suffixes of the longest key the part appears in.
func checkName(part, v string, maxBytes int) error {
	switch {
	case v == "":
		return &InvalidKeyError{Part: part, Reason: "is empty"}
	case !utf8.ValidString(v):
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: "is not valid UTF-8"}
	case strings.Contains(v, keySep):
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: "contains the key separator " + strconv.Quote(keySep)}
	case len(v) > maxBytes:
		return &InvalidKeyError{Part: part, Value: clip(v), Reason: fmt.Sprintf("is %d bytes, at most %d", len(v), maxBytes)}
	}
	return nil
}

// checkTail validates a key part that ends its key (event id, idempotency
// key): not empty, valid UTF-8, and the whole key within DynamoDB's limit.
func checkTail(part, v string, fullKey string, limit int) error {
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
	maxJobBytes  = MaxSortKeyBytes
	maxRunBytes  = MaxSortKeyBytes - len(prefixRun)
	maxTaskBytes = 1000
)

func checkJob(job string) error   { return checkName("job", job, maxJobBytes) }
func checkRun(run string) error   { return checkName("run", run, maxRunBytes) }
func checkTask(task string) error { return checkName("task", task, maxTaskBytes) }

func checkInstanceKey(k InstanceKey) error {
	if err := checkRun(k.Run); err != nil {
		return err
	}
	return checkTask(k.Task)
}

// maxEventIDBytes bounds an event id, which the instance item keeps in its
// recent ids and history records.
const maxEventIDBytes = 512

func checkEventID(_ InstanceKey, id string) error {
	return checkTail("event id", id, id, maxEventIDBytes)
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}

// Paging tokens are opaque to callers: base64url of the LastEvaluatedKey's
// string attributes. decodeToken checks that the token belongs to the
// listing that issued it (want: attribute name -> required value, or "" for
// merely present).
func encodeToken(lek map[string]types.AttributeValue) string {
	if len(lek) == 0 {
		return ""
	}
	m := make(map[string]string, len(lek))
	for k, v := range lek {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			m[k] = s.Value
		}
	}
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(tok string, want map[string]string) (map[string]types.AttributeValue, error) {
	if tok == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, ErrInvalidToken
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || len(m) != len(want) {
		return nil, ErrInvalidToken
	}
	out := make(map[string]types.AttributeValue, len(m))
	for name, required := range want {
		v, ok := m[name]
		if !ok || v == "" || (required != "" && v != required) {
			return nil, ErrInvalidToken
		}
		out[name] = str(v)
	}
	return out, nil
}
