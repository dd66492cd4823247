package scheduler

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
)

// TestGrantFencedCommit: a worker's role granted fenced commits may
// ConditionCheckItem on the ledger's table, and do nothing else: one
// statement, one action, the table's ARN alone (not its indexes).
func TestGrantFencedCommit(t *testing.T) {
	// Not parallel: jsii's one runtime process serves one caller at a time.
	app := awscdk.NewApp(nil)
	stack := awscdk.NewStack(app, jsii.String("Grant"), nil)
	table := awsdynamodb.NewTable(stack, jsii.String("Ledger"), &awsdynamodb.TableProps{
		PartitionKey: &awsdynamodb.Attribute{Name: jsii.String("pk"), Type: awsdynamodb.AttributeType_STRING},
	})
	role := awsiam.NewRole(stack, jsii.String("Worker"), &awsiam.RoleProps{AssumedBy: awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil)})
	s := &Scheduler{Table: table}
	s.GrantFencedCommit(role)

	policies := assertions.Template_FromStack(stack, nil).FindResources(jsii.String("AWS::IAM::Policy"), nil)
	if len(*policies) != 1 {
		t.Fatalf("%d policies, want the role's one", len(*policies))
	}
	for _, p := range *policies {
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Properties struct {
				PolicyDocument struct {
					Statement []struct {
						Effect   string
						Action   any
						Resource any
					}
				}
				Roles []map[string]any
			}
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		st := doc.Properties.PolicyDocument.Statement
		if len(st) != 1 || st[0].Effect != "Allow" || st[0].Action != "dynamodb:ConditionCheckItem" {
			t.Fatalf("statements %+v, want one allowing dynamodb:ConditionCheckItem alone", st)
		}
		arn, _ := json.Marshal(st[0].Resource)
		want := `{"Fn::GetAtt":["` + *stack.GetLogicalId(table.Node().DefaultChild().(awscdk.CfnElement)) + `","Arn"]}`
		if string(arn) != want {
			t.Fatalf("resource %s, want the table's ARN %s", arn, want)
		}
		if len(doc.Properties.Roles) != 1 {
			t.Fatalf("policy on roles %v, want the worker's", doc.Properties.Roles)
		}
	}
}
