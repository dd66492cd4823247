package protocol

// Fence is the check that makes a worker's own DynamoDB write exactly
// once: added as a ConditionCheck to the worker's TransactWriteItems, the
// transaction commits only while the attempt still owns its task (it is
// the task's current attempt and it is running or being cancelled). No
// clock is involved: once a retry has started, or the attempt ended, the
// check fails and the worker's transaction with it (docs/workers.md,
// "Exactly-once effects").
//
// A claim answer's envelope carries it when the ledger is a DynamoDB
// table; an in-memory ledger has nothing a worker could check, and its
// envelopes carry none. The worker needs dynamodb:ConditionCheckItem on
// Table and nothing else.
type Fence struct {
	// Table is the ledger's table name.
	Table string `json:"table"`
	// Key is the task instance item's key: attribute name to its string
	// value.
	Key map[string]string `json:"key"`
	// Condition is the ConditionExpression, over Names and Values.
	Condition string `json:"condition"`
	// Names are the ExpressionAttributeNames.
	Names map[string]string `json:"names"`
	// Values are the ExpressionAttributeValues: a JSON string is a
	// DynamoDB string (S), a JSON number a DynamoDB number (N).
	Values map[string]any `json:"values"`
}
