package scheduler

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/jsii-runtime-go"
)

// EventTriggers makes the stack listen to event buses so that jobs'
// on_event entries can start runs (docs/api.md, "Starting runs from
// events"): one rule per bus forwards the events of Sources to a trigger
// queue (with its DLQ), which the events function drains. Nil: no rule,
// no trigger queue, and on_event matches only what POST /v1/events/put
// delivers.
type EventTriggers struct {
	// Buses are the event buses to listen to, by name ("default",
	// "orders") or ARN, in the stack's account and region: a rule lives on
	// its bus, so no rule can be created on another account's. An ARN
	// passes only in a stack whose account and region are known at synth
	// and are the ARN's; an environment-agnostic stack (the app's) takes
	// names, which always mean its own account and region.
	Buses []string `json:"buses"`
	// Sources are the event sources the rules forward ("shop",
	// "aws.s3"); events of other sources never reach the scheduler.
	Sources []string `json:"sources"`
}

var (
	busName   = regexp.MustCompile(`^[A-Za-z0-9._\-/]{1,256}$`)
	busARN    = regexp.MustCompile(`^arn:aws[a-z-]*:events:[a-z0-9-]+:[0-9]{12}:event-bus/[A-Za-z0-9._\-/]{1,256}$`)
	sourceRef = regexp.MustCompile(`^[A-Za-z0-9._\-/]{1,256}$`)
)

// maxTriggerBuses bounds the rules the construct creates.
const maxTriggerBuses = 20

// validate reports every problem with t at once.
func (t *EventTriggers) validate() error {
	if t == nil {
		return nil
	}
	var errs []error
	if len(t.Buses) == 0 || len(t.Buses) > maxTriggerBuses {
		errs = append(errs, fmt.Errorf("EventTriggers.Buses: name 1 to %d event buses", maxTriggerBuses))
	}
	for i, b := range t.Buses {
		switch {
		case !busName.MatchString(b) && !busARN.MatchString(b):
			errs = append(errs, fmt.Errorf("EventTriggers.Buses: %q is not an event bus name or ARN", b))
		case slices.Contains(t.Buses[:i], b):
			errs = append(errs, fmt.Errorf("EventTriggers.Buses: %q is listed twice", b))
		}
	}
	if len(t.Sources) == 0 {
		errs = append(errs, errors.New("EventTriggers.Sources: name at least one event source"))
	}
	for i, s := range t.Sources {
		switch {
		case !sourceRef.MatchString(s):
			errs = append(errs, fmt.Errorf("EventTriggers.Sources: %q is not an event source", s))
		case slices.Contains(t.Sources[:i], s):
			errs = append(errs, fmt.Errorf("EventTriggers.Sources: %q is listed twice", s))
		}
	}
	return errors.Join(errs...)
}

// checkBuses refuses a bus ARN of another account or region than the
// stack's (account and region empty: not known at synth, as in an
// environment-agnostic stack, where an ARN cannot be checked and is
// refused too). Names pass: they are buses of the stack's own account and
// region.
func (t *EventTriggers) checkBuses(account, region string) error {
	if t == nil {
		return nil
	}
	var errs []error
	for _, b := range t.Buses {
		if !busARN.MatchString(b) {
			continue
		}
		// arn:<partition>:events:<region>:<account>:event-bus/<name>
		parts := strings.SplitN(b, ":", 6)
		busRegion, busAccount, name := parts[3], parts[4], strings.TrimPrefix(parts[5], "event-bus/")
		switch {
		case account == "" || region == "":
			errs = append(errs, fmt.Errorf("EventTriggers.Buses: %q: the stack's account and region are known only at deploy time, "+
				"so a bus ARN cannot be checked against them; name the bus (%q): a rule can be created only on a bus of the stack's own account and region", b, name))
		case busAccount != account || busRegion != region:
			errs = append(errs, fmt.Errorf("EventTriggers.Buses: %q is in account %s, region %s, not the stack's (%s, %s): "+
				"a rule can be created only on a bus of the stack's own account and region; forward the events to a bus there", b, busAccount, busRegion, account, region))
		}
	}
	return errors.Join(errs...)
}

// wireTriggers creates the trigger queue, one rule per bus sending the
// listed sources' events to it (a delivery that fails goes to the queue's
// DLQ), and subscribes the events function, which starts the runs and is
// told the queue's ARN (RUNLEDGER_TRIGGER_QUEUE_ARN).
func (s *Scheduler) wireTriggers(p Props) {
	t := p.EventTriggers
	if t == nil {
		return
	}
	visibility := visibilityFactor * functionSpecs[FunctionEvents].timeout
	pair := s.newQueuePair(p, "TriggerQueue", visibility)
	s.TriggerQueue = &pair
	for i, b := range t.Buses {
		id := fmt.Sprintf("TriggerRule%d", i)
		var bus awsevents.IEventBus
		if strings.HasPrefix(b, "arn:") {
			bus = awsevents.EventBus_FromEventBusArn(s.Construct, jsii.String(id+"Bus"), jsii.String(b))
		} else {
			bus = awsevents.EventBus_FromEventBusName(s.Construct, jsii.String(id+"Bus"), jsii.String(b))
		}
		awsevents.NewRule(s.Construct, jsii.String(id), &awsevents.RuleProps{
			Description:  jsii.String(fmt.Sprintf("runledger: events of %s on bus %s start the jobs whose on_event matches", strings.Join(t.Sources, ", "), b)),
			EventBus:     bus,
			EventPattern: &awsevents.EventPattern{Source: jsii.Strings(t.Sources...)},
			Targets: &[]awsevents.IRuleTarget{
				awseventstargets.NewSqsQueue(pair.Queue, &awseventstargets.SqsQueueProps{
					DeadLetterQueue: pair.DeadLetter,
					RetryAttempts:   jsii.Number(185),
				}),
			},
		})
	}
	s.consume(FunctionEvents, pair.Queue, 10)
	// The events function starts runs only from this queue's records: a
	// trigger event sent to the events queue (which every worker may
	// send to) is refused.
	s.setEnv(FunctionEvents, "RUNLEDGER_TRIGGER_QUEUE_ARN", s.envValue(pair.Queue.QueueArn(), queueARNSize))
}
