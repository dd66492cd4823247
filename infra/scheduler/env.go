package scheduler

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// LambdaEnvironmentLimit is Lambda's limit on a function's environment:
// every variable's name and value together.
const LambdaEnvironmentLimit = 4096

// Upper bounds of the values CloudFormation fills in at deploy time, for
// the environment's size at synthesis. A generated name is the stack's
// name, the resource's logical id (CloudFormation shortens it) and a
// random suffix.
const (
	longestRegion = len("ap-southeast-5")
	dnsSuffix     = len(".amazonaws.com.cn")
	// https://sqs.<region>.amazonaws.com/<account>/<name of at most 80>
	queueURLSize = len("https://sqs.") + longestRegion + dnsSuffix + 1 + 12 + 1 + 80
	// arn:<partition>:sqs:<region>:<account>:<name of at most 80>
	queueARNSize = len("arn:aws-us-gov:sqs:") + longestRegion + 1 + 12 + 1 + 80
	// https://<api id>.execute-api.<region>.amazonaws.com
	apiURLSize = len("https://") + 10 + len(".execute-api.") + longestRegion + dnsSuffix
	// what a generated name adds to the stack's name
	generatedNameExtra = 1 + 64 + 1 + 13
)

// envValue registers an upper bound of the deployed length of a value
// only known at deploy time (a token), and returns the value.
func (s *Scheduler) envValue(v *string, size int) *string {
	s.envSizes[*v] = size
	return v
}

// generatedName is an upper bound of a name CloudFormation generates,
// within the service's own limit.
func (s *Scheduler) generatedName(limit int) int {
	name := awscdk.Stack_Of(s.Construct).StackName()
	n := 128 // CloudFormation's longest stack name
	if !*awscdk.Token_IsUnresolved(name) {
		n = len(*name)
	}
	return min(n+generatedNameExtra, limit)
}

// setEnv sets one variable of a function's environment, in the function
// and in what checkEnvironments measures.
func (s *Scheduler) setEnv(name, key string, value *string) {
	s.Functions[name].AddEnvironment(jsii.String(key), value, nil)
	s.env[name][key] = value
}

// envSize is an upper bound of the deployed size of env: each literal as
// it is, each deploy-time value at its registered bound.
func (s *Scheduler) envSize(env map[string]*string) (int, error) {
	total := 0
	for _, key := range slices.Sorted(maps.Keys(env)) {
		v := env[key]
		n := len(*v)
		if *awscdk.Token_IsUnresolved(v) {
			size, ok := s.envSizes[*v]
			if !ok {
				return 0, fmt.Errorf("%s: a deploy-time value without a size bound (register it with envValue)", key)
			}
			n = size
		}
		total += len(key) + n
	}
	return total, nil
}

// checkEnvironments refuses a function whose environment may exceed
// LambdaEnvironmentLimit once deployed: CloudFormation would fail on it
// halfway through the deploy.
func (s *Scheduler) checkEnvironments(p Props) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(s.env)) {
		size, err := s.envSize(s.env[name])
		if err != nil {
			panic(fmt.Errorf("function %s: %w", name, err))
		}
		if size > LambdaEnvironmentLimit {
			errs = append(errs, fmt.Errorf("function %s: its environment may reach %d bytes once deployed, over Lambda's limit of %d "+
				"(RUNLEDGER_POOL_QUEUES holds %d pools at up to %d bytes each): deploy fewer pools in this stack",
				name, size, LambdaEnvironmentLimit, len(p.Pools), queueURLSize+45))
		}
	}
	return errors.Join(errs...)
}
