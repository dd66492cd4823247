package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/runledger/runledger/shared/ledger"
	"github.com/runledger/runledger/shared/tableschema"
)

// EnsureTable creates the table of tableschema.Table() under name, or, when
// a table of that name exists (the local stack's persisted one), brings its
// indexes to the schema's layout: it adds each index of the schema the
// table lacks, then deletes each retired index it still has, one at a time
// as DynamoDB allows, waiting for each to finish. Items stay; DynamoDB fills
// a new index from them. It returns what it changed, one sentence each, for
// the caller to log (none for a new table or one already in the layout).
// An index of this version's name with another layout is ErrTableLayout:
// no UpdateTable converts it, so the table has to be recreated.
//
// Deployed tables are the CDK stack's and migrate by deploy
// (docs/deploy.md); this is for the local stack and tests.
func EnsureTable(ctx context.Context, db *dynamodb.Client, name string) ([]string, error) {
	err := CreateTable(ctx, db, name)
	if !errors.Is(err, ledger.ErrAlreadyExists) {
		return nil, err
	}
	op := func(err error) error { return fmt.Errorf("migrate table %s: %w", name, err) }
	// A table created a moment ago by someone else may still be CREATING.
	if err := waitActive(ctx, db, name); err != nil {
		return nil, op(err)
	}
	desc, err := describe(ctx, db, name)
	if err != nil {
		return nil, op(err)
	}
	sc := tableschema.Table()
	var changes []string
	for _, ix := range sc.Indexes {
		have := findIndex(desc, ix.Name)
		if have != nil {
			if err := sameLayout(ix, have); err != nil {
				return changes, op(err)
			}
			continue
		}
		if err := addIndex(ctx, db, name, ix); err != nil {
			return changes, op(err)
		}
		changes = append(changes, fmt.Sprintf("added index %s (%s)", ix.Name, describeLayout(ix)))
	}
	for _, ix := range sc.Retired {
		if findIndex(desc, ix.Name) == nil {
			continue
		}
		if err := deleteIndex(ctx, db, name, ix.Name); err != nil {
			return changes, op(err)
		}
		changes = append(changes, fmt.Sprintf("deleted retired index %s (%s)", ix.Name, describeLayout(ix)))
	}
	return changes, nil
}

func describe(ctx context.Context, db *dynamodb.Client, name string) (*types.TableDescription, error) {
	out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		return nil, translate(err)
	}
	return out.Table, nil
}

func findIndex(t *types.TableDescription, name string) *types.GlobalSecondaryIndexDescription {
	for i := range t.GlobalSecondaryIndexes {
		if aws.ToString(t.GlobalSecondaryIndexes[i].IndexName) == name {
			return &t.GlobalSecondaryIndexes[i]
		}
	}
	return nil
}

// sameLayout compares an existing index with the schema's definition.
func sameLayout(want tableschema.Index, have *types.GlobalSecondaryIndexDescription) error {
	var keys []string
	for _, k := range have.KeySchema {
		keys = append(keys, aws.ToString(k.AttributeName)+" "+string(k.KeyType))
	}
	got := tableschema.Index{Name: want.Name}
	if have.Projection != nil {
		got.Projection = tableschema.Projection(have.Projection.ProjectionType)
		got.NonKeyAttributes = slices.Sorted(slices.Values(have.Projection.NonKeyAttributes))
	}
	wantKeys := []string{want.PartitionKey.Name + " HASH", want.SortKey.Name + " RANGE"}
	wantAttrs := slices.Sorted(slices.Values(want.NonKeyAttributes))
	if !slices.Equal(keys, wantKeys) || got.Projection != want.Projection || !slices.Equal(got.NonKeyAttributes, wantAttrs) {
		return fmt.Errorf("%w: index %s is keyed %v and projects %s, want %v and %s; recreate the table",
			ErrTableLayout, want.Name, keys, describeLayout(got), wantKeys, describeLayout(want))
	}
	return nil
}

func describeLayout(ix tableschema.Index) string {
	if ix.Projection == tableschema.ProjectInclude {
		return "projects the keys and " + strings.Join(ix.NonKeyAttributes, ", ")
	}
	return "projects " + strings.ToLower(string(ix.Projection)) + " attributes"
}

func addIndex(ctx context.Context, db *dynamodb.Client, table string, ix tableschema.Index) error {
	_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(ix.PartitionKey.Name), AttributeType: types.ScalarAttributeType(ix.PartitionKey.Type)},
			{AttributeName: aws.String(ix.SortKey.Name), AttributeType: types.ScalarAttributeType(ix.SortKey.Type)},
		},
		GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
			IndexName: aws.String(ix.Name), KeySchema: indexKeys(ix), Projection: indexProjection(ix),
		}}},
	})
	if err != nil {
		return fmt.Errorf("add index %s: %w", ix.Name, translate(err))
	}
	if err := waitActive(ctx, db, table); err != nil {
		return fmt.Errorf("add index %s: %w", ix.Name, err)
	}
	return nil
}

func deleteIndex(ctx context.Context, db *dynamodb.Client, table, index string) error {
	_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
		TableName: aws.String(table),
		GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Delete: &types.DeleteGlobalSecondaryIndexAction{
			IndexName: aws.String(index),
		}}},
	})
	if err != nil {
		return fmt.Errorf("delete index %s: %w", index, translate(err))
	}
	err = waitTable(ctx, db, table, func(t *types.TableDescription) bool { return active(t) && findIndex(t, index) == nil })
	if err != nil {
		return fmt.Errorf("delete index %s: wait until gone: %w", index, err)
	}
	return nil
}
