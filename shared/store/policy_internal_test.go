package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/statemodel"
)

// TestPolicyDelta: an instance item stores only the fields of its policy
// that differ from the default (none for the default policy), reads every
// policy back as it was, and an item written before, with its whole
// compact policy (pc) or the long-named one (policy), still reads its own.
func TestPolicyDelta(t *testing.T) {
	custom := statemodel.DefaultPolicy()
	custom.Retry.MaxAttempts = 5
	custom.Retry.Jitter = statemodel.JitterNone
	custom.EvidenceWindow = 0 // zero where the default has a value
	custom.Timeouts.Run = 90 * time.Second
	spaced := statemodel.DefaultPolicy()
	spaced.Retry.Intervals = []time.Duration{30 * time.Second, 5 * time.Minute}
	spaced.Retry.Jitter = statemodel.JitterNone
	for _, tc := range []struct {
		name   string
		policy statemodel.Policy
		fields int // fields the item stores
	}{
		{"default", statemodel.DefaultPolicy(), 0},
		{"custom", custom, 4},
		{"retry intervals", spaced, 2},
		{"zero", statemodel.Policy{}, len(compactPolicyFields(statemodel.DefaultPolicy()))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := ledger.Instance{Key: ledger.InstanceKey{Run: "r1", Task: "a"}, Policy: tc.policy}
			it := instanceItem("RUN#r1", inst).present()
			if _, ok := it[attrPolicyC]; ok {
				t.Fatalf("new item carries the whole compact policy %q", attrPolicyC)
			}
			stored, _ := it[attrPolicyD].(*types.AttributeValueMemberM)
			if n := 0; stored != nil {
				n = len(stored.Value)
				if n != tc.fields {
					t.Fatalf("item stores %d policy fields, want %d: %v", n, tc.fields, stored.Value)
				}
			} else if tc.fields != 0 {
				t.Fatalf("item stores no policy, want %d fields", tc.fields)
			}
			got, err := decodeInstance(it)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Policy, tc.policy) {
				t.Fatalf("policy read back %+v, want %+v", got.Policy, tc.policy)
			}
		})
	}
	t.Run("written before", func(t *testing.T) {
		for name, attr := range map[string]types.AttributeValue{attrPolicyC: compactPolicy(custom), attrPolicy: policyItem(custom, longPolicy(), false)} {
			it := instanceItem("RUN#r1", ledger.Instance{Key: ledger.InstanceKey{Run: "r1", Task: "a"}}).present()
			delete(it, attrPolicyD)
			it[name] = attr
			got, err := decodeInstance(it)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Policy, custom) {
				t.Fatalf("%s: policy read back %+v, want %+v", name, got.Policy, custom)
			}
		}
	})
}
