package scheduler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// TestEnvironmentSizeLimit: RUNLEDGER_POOL_QUEUES grows with every pool;
// a stack whose functions' environment may pass Lambda's 4 KB once
// CloudFormation fills in the queue URLs is refused at synthesis, naming
// each function and its size, not halfway through a deploy.
func TestEnvironmentSizeLimit(t *testing.T) {
	t.Parallel()
	build := func(pools int) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		var names []string
		for i := range pools {
			names = append(names, fmt.Sprintf("pool-%02d", i))
		}
		app := awscdk.NewApp(nil)
		stack := awscdk.NewStack(app, jsii.String("Runledger"), nil)
		NewScheduler(stack, jsii.String("Scheduler"), &Props{
			CodeDir: codeDir(t, FunctionNames()...), Pools: names, ExampleWorkerPool: names[0],
		})
		return nil
	}
	if err := build(10); err != nil {
		t.Fatalf("10 pools: %v", err)
	}
	err := build(30)
	if err == nil {
		t.Fatal("30 pools (about 5 KB of queue URLs in RUNLEDGER_POOL_QUEUES) were accepted")
	}
	for _, want := range []string{"function api: its environment may reach ", "function events: ", "function ticker: ", "function reconciler: ", "limit of 4096", "30 pools"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "function worker") {
		t.Errorf("error %q names the worker, whose environment holds no pool queues", err)
	}
}
