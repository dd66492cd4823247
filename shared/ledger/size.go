package ledger

// DynamoDB's size limits.
const (
	// MaxItemSize is DynamoDB's item size limit: 400 KB, attribute names
	// and values together.
	MaxItemSize = 400 * 1024
	// MaxTransactionSize is the aggregate size limit of one
	// TransactWriteItems request.
	MaxTransactionSize = 4 * 1024 * 1024
)
