package scheduler

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
)

// LambdaExecutor allows the lambda executor (docs/api.md, "Executors"):
// the functions jobs' tasks may invoke. The scheduler refuses a job naming
// another (422 invalid_field), and its functions may invoke exactly these.
type LambdaExecutor struct {
	// Functions are function names in the stack's account and region, or
	// function ARNs, with or without a qualifier ("etl", "etl:live",
	// "arn:aws:lambda:eu-west-1:123456789012:function:etl"). An unqualified
	// one may be invoked under any qualifier.
	Functions []string `json:"functions"`
	// WireOnFailure gives each function an asynchronous invocation
	// configuration (AWS::Lambda::EventInvokeConfig, on its qualifier or
	// $LATEST) whose on-failure destination is the scheduler's events
	// queue, so a failed invocation resolves its LOST attempt at once.
	// The function's execution role must be allowed sqs:SendMessage on the
	// events queue (output EventsQueueArn): Lambda sends the record as the
	// function. Leave it false for a function that already has such a
	// configuration, and set its on-failure destination to the events
	// queue yourself (docs/deploy.md).
	WireOnFailure bool `json:"wireOnFailure"`
}

// lambdaInvoke is the lambda executor's one call (shared/lambdaexec).
var lambdaInvoke = []string{"lambda:InvokeFunction"}

var (
	functionName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]{1,128})?$`)
	functionARN  = regexp.MustCompile(`^arn:aws[a-z-]*:lambda:[a-z0-9-]+:[0-9]{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]{1,128})?$`)
)

// validate reports every problem with e at once.
func (e *LambdaExecutor) validate() error {
	if e == nil {
		return nil
	}
	var errs []error
	if len(e.Functions) == 0 {
		errs = append(errs, errors.New("Lambda.Functions: name at least one function"))
	}
	var seen []lambdaRef
	for _, f := range e.Functions {
		if !functionName.MatchString(f) && !functionARN.MatchString(f) {
			errs = append(errs, fmt.Errorf("Lambda.Functions: %q is not a function name or ARN", f))
			continue
		}
		ref := parseLambdaRef(f)
		if i := slices.IndexFunc(seen, ref.same); i >= 0 {
			errs = append(errs, fmt.Errorf("Lambda.Functions: %q and %q name the same function %s, qualifier %s: list it once",
				seen[i].text, f, ref.name, ref.qualifier))
			continue
		}
		seen = append(seen, ref)
	}
	return errors.Join(errs...)
}

// lambdaRef is an allowed function as Lambda resolves it: its name, the
// account and region of an ARN (empty for a name: the stack's own), and
// its qualifier, $LATEST when none is given (what an unqualified
// invocation runs, and where an unqualified function's on-failure
// configuration goes).
type lambdaRef struct {
	text, account, region, name, qualifier string
}

func parseLambdaRef(f string) lambdaRef {
	r := lambdaRef{text: f, name: f}
	if strings.HasPrefix(f, "arn:") {
		// arn:<partition>:lambda:<region>:<account>:function:<name>[:<qualifier>]
		parts := strings.Split(f, ":")
		r.region, r.account, r.name = parts[3], parts[4], parts[6]
		if len(parts) > 7 {
			r.qualifier = parts[7]
		}
	} else {
		r.name, r.qualifier, _ = strings.Cut(f, ":")
	}
	if r.qualifier == "" {
		r.qualifier = "$LATEST"
	}
	return r
}

// same reports whether r and o may be one function under one qualifier:
// a name is in the stack's account and region, which the
// environment-agnostic stack learns only at deploy time, so it may be any
// ARN of that name.
func (r lambdaRef) same(o lambdaRef) bool {
	match := func(a, b string) bool { return a == "" || b == "" || a == b }
	return r.name == o.name && r.qualifier == o.qualifier && match(r.account, o.account) && match(r.region, o.region)
}

// lambdaFunction is a function's ARN (in the stack's account and region
// for a name) and its qualifier.
func lambdaFunction(f string) (arn *string, qualifier string) {
	if strings.HasPrefix(f, "arn:") {
		parts := strings.Split(f, ":")
		if len(parts) > 7 {
			return jsii.String(strings.Join(parts[:7], ":")), parts[7]
		}
		return jsii.String(f), ""
	}
	name, qualifier, _ := strings.Cut(f, ":")
	return awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":lambda:"), awscdk.Aws_REGION(),
		jsii.String(":"), awscdk.Aws_ACCOUNT_ID(), jsii.String(":function:" + name),
	}), qualifier
}

// wireLambda gives the functions that dispatch (whose allow-lists
// wireExecutorsAllowed sets) lambda:InvokeFunction on
// exactly the allowed functions (an unqualified one under every qualifier;
// a qualified one under that qualifier only), lets the events function
// hold an on-failure record on the events queue until its attempt's lease
// ends, and with WireOnFailure points each function's on-failure
// destination at the events queue.
func (s *Scheduler) wireLambda(p Props) {
	e := p.Lambda
	if e == nil {
		return
	}
	var resources []*string
	for _, f := range e.Functions {
		arn, qualifier := lambdaFunction(f)
		if qualifier != "" {
			resources = append(resources, awscdk.Fn_Join(jsii.String(":"), &[]*string{arn, jsii.String(qualifier)}))
			continue
		}
		resources = append(resources, arn, awscdk.Fn_Join(jsii.String(""), &[]*string{arn, jsii.String(":*")}))
	}
	for _, name := range dispatchers {
		fn, ok := s.Functions[name]
		if !ok {
			continue
		}
		fn.Role().AddToPrincipalPolicy(allow(lambdaInvoke, resources...))
		suppress(fn.Role(), "AwsSolutions-IAM5", "The lambda executor invokes the allowed functions under any of their "+
			"qualifiers (function:<name>:*): which version or alias a job names is the job's choice.")
	}
	if fn, ok := s.Functions[FunctionEvents]; ok {
		fn.Role().AddToPrincipalPolicy(allow(sqsSend, s.EventsQueue.Queue.QueueArn()))
	}
	if !e.WireOnFailure {
		return
	}
	for i, f := range e.Functions {
		arn, qualifier := lambdaFunction(f)
		if qualifier == "" {
			qualifier = "$LATEST"
		}
		awslambda.NewCfnEventInvokeConfig(s.Construct, jsii.String(fmt.Sprintf("LambdaExecutorOnFailure%d", i)), &awslambda.CfnEventInvokeConfigProps{
			FunctionName: arn,
			Qualifier:    jsii.String(qualifier),
			DestinationConfig: &awslambda.CfnEventInvokeConfig_DestinationConfigProperty{
				OnFailure: &awslambda.CfnEventInvokeConfig_OnFailureProperty{Destination: s.EventsQueue.Queue.QueueArn()},
			},
		})
	}
}
