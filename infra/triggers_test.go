package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/runledger/runledger/infra/scheduler"
)

// EventTriggers: one rule per bus, on that bus, forwarding the listed
// sources only to the trigger queue, whose DLQ takes failed deliveries
// and which the events function drains; a stack without the props has no
// trigger rule.
func TestTriggerRules(t *testing.T) {
	t.Parallel()
	queue := logicalID(full, "TriggerQueue")
	dlq := ""
	if redrive, ok := full.resources[queue].Properties["RedrivePolicy"].(map[string]any); ok {
		dlq = ref(redrive["deadLetterTargetArn"])
	}
	if dlq == "" {
		t.Fatalf("trigger queue %s has no DLQ", queue)
	}
	var buses []string
	for id, r := range full.ofType("AWS::Events::Rule") {
		pattern, ok := r.Properties["EventPattern"].(map[string]any)
		if !ok {
			continue
		}
		if !reflect.DeepEqual(pattern, map[string]any{"source": []any{"shop", "aws.s3"}}) {
			t.Errorf("%s: pattern %v, want the listed sources only", id, pattern)
		}
		buses = append(buses, render(r.Properties["EventBusName"]))
		targets, _ := r.Properties["Targets"].([]any)
		if len(targets) != 1 {
			t.Fatalf("%s: targets %v, want the trigger queue", id, targets)
		}
		target := targets[0].(map[string]any)
		deadLetter, _ := target["DeadLetterConfig"].(map[string]any)
		if ref(target["Arn"]) != queue || ref(deadLetter["Arn"]) != dlq {
			t.Errorf("%s: target %v, want the trigger queue %s with its DLQ %s", id, target, queue, dlq)
		}
	}
	slices.Sort(buses)
	if want := []string{"default", "orders"}; !reflect.DeepEqual(buses, want) {
		t.Errorf("trigger rules on buses %v, want one on each of %v", buses, want)
	}
	// The events function starts runs from the trigger queue's records
	// only: it is told the queue's ARN; a stack without the props tells
	// it none.
	events := full.resources[full.functions[scheduler.FunctionEvents]].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
	arnRef, _ := events["RUNLEDGER_TRIGGER_QUEUE_ARN"].(map[string]any)
	if arn, _ := arnRef["Fn::GetAtt"].([]any); len(arn) != 2 || arn[0] != queue || arn[1] != "Arn" {
		t.Errorf("events RUNLEDGER_TRIGGER_QUEUE_ARN %v, want the ARN of the trigger queue %s", events["RUNLEDGER_TRIGGER_QUEUE_ARN"], queue)
	}
	if v, ok := jwt.resources[jwt.functions[scheduler.FunctionEvents]].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)["RUNLEDGER_TRIGGER_QUEUE_ARN"]; ok {
		t.Errorf("Jwt stack (no EventTriggers): events RUNLEDGER_TRIGGER_QUEUE_ARN %v", v)
	}
	for id, r := range jwt.ofType("AWS::Events::Rule") {
		if r.Properties["EventPattern"] != nil {
			t.Errorf("Jwt stack (no EventTriggers): trigger rule %s", id)
		}
	}
	// EventBridge may send to the queue and its DLQ, and only through
	// the rules.
	for _, q := range []string{queue, dlq} {
		found := false
		for _, p := range full.ofType("AWS::SQS::QueuePolicy") {
			if !strings.Contains(render(p.Properties["Queues"]), q) {
				continue
			}
			var sts []map[string]any
			collectStatements(q, p.Properties["PolicyDocument"], &sts)
			for _, st := range sts {
				principal, _ := st["Principal"].(map[string]any)
				if principal["Service"] == "events.amazonaws.com" && st["Effect"] == "Allow" {
					found = found || st["Condition"] != nil
				}
			}
		}
		if !found {
			t.Errorf("queue %s: no conditioned statement lets EventBridge send to it", q)
		}
	}
}

func TestEventTriggersValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		triggers scheduler.EventTriggers
		want     string
	}{
		{scheduler.EventTriggers{Sources: []string{"shop"}}, "EventTriggers.Buses: name 1 to"},
		{scheduler.EventTriggers{Buses: []string{"default"}}, "EventTriggers.Sources: name at least one"},
		{scheduler.EventTriggers{Buses: []string{"bad bus"}, Sources: []string{"shop"}}, `"bad bus" is not an event bus name or ARN`},
		{scheduler.EventTriggers{Buses: []string{"a", "a"}, Sources: []string{"shop"}}, `"a" is listed twice`},
		{scheduler.EventTriggers{Buses: []string{"a"}, Sources: []string{"shop", "shop"}}, `"shop" is listed twice`},
	} {
		p := scheduler.Props{CodeDir: full.cfg.Props.CodeDir, EventTriggers: &c.triggers}
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want %q", c.triggers, err, c.want)
		}
	}
	ok := scheduler.Props{CodeDir: full.cfg.Props.CodeDir, EventTriggers: &scheduler.EventTriggers{
		Buses: []string{"default", "arn:aws:events:eu-west-1:123456789012:event-bus/orders"}, Sources: []string{"shop"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid triggers refused: %v", err)
	}
}
