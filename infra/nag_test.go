package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/cxapi"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// canary holds the findings on a stack that breaks two AwsSolutions rules
// on purpose: it shows the rules run and their findings reach the tests.
var canary []finding

// finding is an error or warning annotation on a construct: cdk-nag reports
// its unsuppressed findings so, and the CDK its own problems.
type finding struct {
	level, path, message string
}

func (f finding) String() string { return f.level + " " + f.path + ": " + f.message }

// applyNag runs cdk-nag's AwsSolutions rules over stack when it synthesizes.
// Verbose puts each rule's explanation into the finding's message.
func applyNag(stack awscdk.Stack) {
	awscdk.Aspects_Of(stack).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose: jsii.Bool(true),
		Reports: jsii.Bool(false),
	}), nil)
}

// nagCanary is a stack with one bare queue: no dead-letter queue
// (AwsSolutions-SQS3) and plain HTTP allowed (AwsSolutions-SQS4).
func nagCanary(app awscdk.App) awscdk.Stack {
	stack := awscdk.NewStack(app, jsii.String("NagCanary"), nil)
	awssqs.NewQueue(stack, jsii.String("Bare"), nil)
	return stack
}

// findings reads the error and warning annotations of a synthesized stack.
func findings(stack awscdk.Stack) []finding {
	annotations := assertions.Annotations_FromStack(stack)
	var out []finding
	for level, found := range map[string]*[]*cxapi.SynthesisMessage{
		"error":   annotations.FindError(jsii.String("*"), assertions.Match_AnyValue()),
		"warning": annotations.FindWarning(jsii.String("*"), assertions.Match_AnyValue()),
	} {
		for _, m := range *found {
			out = append(out, finding{level, *m.Id, fmt.Sprint(m.Entry.Data)})
		}
	}
	slices.SortFunc(out, func(a, b finding) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// TestNagAwsSolutions: cdk-nag's AwsSolutions rules find nothing in either
// stack. Each finding is fixed in the construct or suppressed next to the
// resource with the reason it is acceptable for this stack (infra/scheduler,
// nag.go); any new finding, error or warning, fails here.
func TestNagAwsSolutions(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		for _, f := range s.findings {
			t.Errorf("%s: %s", s.cfg.StackName, f)
		}
	}
}

// TestNagCanary proves the check above can fail: the bare queue's findings
// arrive as errors on its resource.
func TestNagCanary(t *testing.T) {
	t.Parallel()
	for _, rule := range []string{"AwsSolutions-SQS3", "AwsSolutions-SQS4"} {
		found := slices.ContainsFunc(canary, func(f finding) bool {
			return f.level == "error" && f.path == "/NagCanary/Bare/Resource" && strings.HasPrefix(f.message, rule+":")
		})
		if !found {
			t.Errorf("%s not reported on the canary queue; findings: %v", rule, canary)
		}
	}
}

// annotationsInValidationReport is the CDK feature flag that turns error
// annotations into a failed synthesis.
const annotationsInValidationReport = "@aws-cdk/core:annotationsInValidationReport"

// TestAccessLog: the HTTP API logs every request as a JSON line to a log
// group with the functions' retention (AwsSolutions-APIG1 asks only that
// some access log exists).
func TestAccessLog(t *testing.T) {
	t.Parallel()
	for _, s := range []*synthesized{full, jwt} {
		stages := s.ofType("AWS::ApiGatewayV2::Stage")
		if len(stages) != 1 {
			t.Fatalf("%s: %d stages, want 1", s.cfg.StackName, len(stages))
		}
		for id, stage := range stages {
			settings, _ := stage.Properties["AccessLogSettings"].(map[string]any)
			logs := s.resources[ref(settings["DestinationArn"])]
			if logs.Type != "AWS::Logs::LogGroup" || number(logs.Properties["RetentionInDays"]) != 30 {
				t.Errorf("%s/%s: access log destination %v, want a log group with 30 days' retention", s.cfg.StackName, id, logs)
			}
			var format map[string]string
			if err := json.Unmarshal([]byte(fmt.Sprint(settings["Format"])), &format); err != nil {
				t.Errorf("%s/%s: access log format %v: not a JSON object of strings: %v", s.cfg.StackName, id, settings["Format"], err)
			}
			for _, v := range []string{"$context.requestId", "$context.routeKey", "$context.status", "$context.identity.sourceIp"} {
				if !slices.Contains(slices.Collect(maps.Values(format)), v) {
					t.Errorf("%s/%s: access log format %v lacks %s", s.cfg.StackName, id, format, v)
				}
			}
		}
	}
}
