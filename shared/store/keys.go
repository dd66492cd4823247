package store

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// Key prefixes and fixed sort keys (docs/store.md, the layout).
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

func parseTime(s string) (time.Time, error) { return time.Parse(ledger.TimeLayout, s) }

func jobPK(job string) string { return prefixJob + job }
func runPK(run string) string { return prefixRun + run }
func instanceSK(task string) string {
	if parent, i, ok := ledger.ParseChild(task); ok {
		return childSK(parent, i)
	}
	return prefixTask + task
}
func attemptSK(task string, n int) string {
	return fmt.Sprintf("%s%s%03d", instanceSK(task), attemptInfix, n)
}
func transitionSK(task string, seq int64) string {
	return fmt.Sprintf("%s%s%s%010d", prefixTransition, task, ledger.KeySep, seq)
}
func transitionPrefix(task string) string { return prefixTransition + task + ledger.KeySep }
func slotSK(logical time.Time) string     { return prefixSlot + ledger.FormatTime(logical) }
func idemSK(key string) string            { return prefixIdem + key }

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
		return nil, ledger.ErrInvalidPageToken
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil || len(m) != len(want) {
		return nil, ledger.ErrInvalidPageToken
	}
	out := make(map[string]types.AttributeValue, len(m))
	for name, required := range want {
		v, ok := m[name]
		if !ok || v == "" || (required != "" && v != required) {
			return nil, ledger.ErrInvalidPageToken
		}
		out[name] = str(v)
	}
	return out, nil
}
