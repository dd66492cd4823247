package scheduler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

// TestTriggerBusesOfOtherAccountsRefused: a rule lives on its bus, so a
// bus ARN of another account or region than the stack's is refused at
// synth, and so is any ARN in a stack whose account is known only at
// deploy time; names pass everywhere, and an ARN of the stack's own
// account and region passes in a stack that knows them.
func TestTriggerBusesOfOtherAccountsRefused(t *testing.T) {
	// Not parallel: jsii's one runtime process serves one caller at a
	// time, and TestEnvironmentSizeLimit builds stacks in parallel.
	const (
		own     = "arn:aws:events:eu-west-1:123456789012:event-bus/orders"
		foreign = "arn:aws:events:eu-west-1:210987654321:event-bus/orders"
		away    = "arn:aws:events:us-east-1:123456789012:event-bus/orders"
	)
	build := func(env *awscdk.Environment, buses ...string) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%v", r)
			}
		}()
		app := awscdk.NewApp(nil)
		stack := awscdk.NewStack(app, jsii.String("Runledger"), &awscdk.StackProps{Env: env})
		NewScheduler(stack, jsii.String("Scheduler"), &Props{
			CodeDir:       codeDir(t, FunctionNames()...),
			EventTriggers: &EventTriggers{Buses: buses, Sources: []string{"shop"}},
		})
		return nil
	}
	known := &awscdk.Environment{Account: jsii.String("123456789012"), Region: jsii.String("eu-west-1")}
	for _, c := range []struct {
		name  string
		env   *awscdk.Environment
		buses []string
		want  string // "" accepted
	}{
		{"names, agnostic", nil, []string{"default", "orders"}, ""},
		{"names, known", known, []string{"default", "orders"}, ""},
		{"own ARN, known", known, []string{own}, ""},
		{"foreign account", known, []string{"default", foreign}, `"` + foreign + `" is in account 210987654321, region eu-west-1, not the stack's (123456789012, eu-west-1)`},
		{"other region", known, []string{away}, `"` + away + `" is in account 123456789012, region us-east-1`},
		{"ARN, agnostic", nil, []string{own}, `known only at deploy time, so a bus ARN cannot be checked against them; name the bus ("orders")`},
	} {
		err := build(c.env, c.buses...)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
