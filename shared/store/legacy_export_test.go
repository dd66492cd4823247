package store

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
	"github.com/runledger/runledger/statemodel"
)

// LegacyInstanceItem is inst's item as the store wrote it before compact
// records: long-named records inline under "history", the policy under
// "policy", the snapshot's attempts (all of them given) under "attempts"
// its recent event ids, as sent, under "recent", and its times as time
// strings.
func LegacyInstanceItem(inst ledger.Instance, attempts []statemodel.AttemptRecord) map[string]types.AttributeValue {
	it := instanceItem(runPK(inst.Key.Run), inst)
	it[attrRecs], it[attrInlineAttempts], it[attrPolicyD] = nil, nil, nil
	it[attrRetryAtC], it[attrDeadlineC], it[attrCreatedAtC], it[attrScheduledAtC] = nil, nil, nil, nil
	s := inst.Snapshot
	it[attrRetryAt], it[attrDeadline], it[attrCreatedAt], it[attrScheduledAt] = tm(s.RetryAt), tm(s.Deadline), tm(s.CreatedAt), tm(s.ScheduledAt)
	it[attrHistory] = legacyRecords(inst.History)
	it[attrPolicy] = policyItem(inst.Policy, longPolicy(), false)
	as := make([]types.AttributeValue, len(attempts))
	for i, a := range attempts {
		as[i] = &types.AttributeValueMemberM{Value: attemptRecordItem(a).present()}
	}
	it[attrAttempts] = &types.AttributeValueMemberL{Value: as}
	recent := make([]types.AttributeValue, len(inst.Snapshot.Recent))
	for i, e := range inst.Snapshot.Recent {
		recent[i] = &types.AttributeValueMemberM{Value: item{attrID: str(e.ID), attrSeq: num(e.Seq), attrTo: str(string(e.To))}.present()}
	}
	it[attrRecent] = &types.AttributeValueMemberL{Value: recent}
	return it.present()
}

// LegacyHistoryItem is a history item of records as the store wrote it
// before compact records.
func LegacyHistoryItem(key ledger.InstanceKey, trs []statemodel.Transition) map[string]types.AttributeValue {
	return item{
		tableschema.PK: str(runPK(key.Run)),
		tableschema.SK: str(transitionSK(key.Task, trs[len(trs)-1].Seq)),
		attrKind:       str(kindHistory),
		attrRun:        str(key.Run),
		attrTask:       str(key.Task),
		attrRecords:    legacyRecords(trs),
	}.present()
}

func legacyRecords(trs []statemodel.Transition) types.AttributeValue {
	l := make([]types.AttributeValue, len(trs))
	for i, tr := range trs {
		l[i] = &types.AttributeValueMemberM{Value: transitionFields(tr).present()}
	}
	return &types.AttributeValueMemberL{Value: l}
}
