package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// tableWait bounds how long CreateTable and DeleteTable wait for the table
// to become ACTIVE or to disappear.
const tableWait = 5 * time.Minute

// CreateTable creates the table of tableschema.Table() under name, on
// demand capacity, waits until the table and its indexes are ACTIVE and
// enables TTL on the schema's TTL attribute when the endpoint supports it.
// It is for tests and the local stack; deployed tables come from the CDK
// stack, which reads the same schema.
func CreateTable(ctx context.Context, db *dynamodb.Client, name string) error {
	sc := tableschema.Table()
	var defs []types.AttributeDefinition
	for _, a := range sc.Attributes() {
		defs = append(defs, types.AttributeDefinition{
			AttributeName: aws.String(a.Name), AttributeType: types.ScalarAttributeType(a.Type),
		})
	}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range sc.Indexes {
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name), KeySchema: indexKeys(ix), Projection: indexProjection(ix),
		})
	}
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: defs,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(sc.PartitionKey.Name), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sc.SortKey.Name), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: gsis,
		BillingMode:            types.BillingModePayPerRequest,
	})
	if err != nil {
		var inUse *types.ResourceInUseException
		if errors.As(err, &inUse) {
			return fmt.Errorf("create table %s: %w", name, ledger.ErrAlreadyExists)
		}
		return fmt.Errorf("create table %s: %w", name, translate(err))
	}
	if err := waitActive(ctx, db, name); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	_, err = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(sc.TTLAttribute), Enabled: aws.Bool(true),
		},
	})
	if err != nil && !unsupported(err) {
		return fmt.Errorf("enable ttl on %s: %w", name, translate(err))
	}
	return nil
}

func indexKeys(ix tableschema.Index) []types.KeySchemaElement {
	return []types.KeySchemaElement{
		{AttributeName: aws.String(ix.PartitionKey.Name), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(ix.SortKey.Name), KeyType: types.KeyTypeRange},
	}
}

func indexProjection(ix tableschema.Index) *types.Projection {
	p := &types.Projection{ProjectionType: types.ProjectionType(ix.Projection)}
	if ix.Projection == tableschema.ProjectInclude {
		p.NonKeyAttributes = ix.NonKeyAttributes
	}
	return p
}

// unsupported reports an endpoint that does not implement an operation.
func unsupported(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "UnknownOperationException", "NotImplementedException", "InvalidAction":
			return true
		}
	}
	return false
}

// waitActive polls DescribeTable until the table and every index are ACTIVE.
func waitActive(ctx context.Context, db *dynamodb.Client, name string) error {
	if err := waitTable(ctx, db, name, active); err != nil {
		return fmt.Errorf("wait for ACTIVE: %w", err)
	}
	return nil
}

// waitTable polls DescribeTable until done holds, at most tableWait.
func waitTable(ctx context.Context, db *dynamodb.Client, name string, done func(*types.TableDescription) bool) error {
	ctx, cancel := context.WithTimeout(ctx, tableWait)
	defer cancel()
	for try := 0; ; try++ {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			var rnf *types.ResourceNotFoundException
			if !errors.As(err, &rnf) { // a new table may not be visible yet
				return translate(err)
			}
		} else if done(out.Table) {
			return nil
		}
		if err := backoff(ctx, min(try, 6)); err != nil {
			return err
		}
	}
}

func active(t *types.TableDescription) bool {
	if t == nil || t.TableStatus != types.TableStatusActive {
		return false
	}
	for _, ix := range t.GlobalSecondaryIndexes {
		if ix.IndexStatus != types.IndexStatusActive {
			return false
		}
	}
	return true
}

// DeleteTable deletes the table and waits until it is gone. A table that
// does not exist is not an error.
func DeleteTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	if err != nil {
		var rnf *types.ResourceNotFoundException
		if errors.As(err, &rnf) {
			return nil
		}
		return fmt.Errorf("delete table %s: %w", name, translate(err))
	}
	w := dynamodb.NewTableNotExistsWaiter(db, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay = 20 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, tableWait); err != nil {
		return fmt.Errorf("delete table %s: wait until gone: %w", name, err)
	}
	return nil
}
