package scheduler

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"
)

// MetricNamespace holds the metrics the functions emit in CloudWatch EMF
// (docs/wiring.md, "Metrics"); the alarms read InstanceLost (Count, one
// per transition to LOST), QueueWait (Milliseconds, one per QUEUED ->
// RUNNING) and RunFailed (Count, one per failed run), without dimensions.
const MetricNamespace = "Runledger"

var period = awscdk.Duration_Minutes(jsii.Number(5))

// emfMetric names one of the functions' metrics. An empty label keeps an
// alarm on a plain metric (a label makes CDK render a metric query).
func emfMetric(name, statistic, label string) awscloudwatch.Metric {
	props := &awscloudwatch.MetricProps{
		Namespace:  jsii.String(MetricNamespace),
		MetricName: jsii.String(name),
		Statistic:  jsii.String(statistic),
		Period:     period,
	}
	if label != "" {
		props.Label = jsii.String(label)
	}
	return awscloudwatch.NewMetric(props)
}

// namedQueue is a queue with the label its alarms and widgets use.
type namedQueue struct {
	id, label string
	pair      QueuePair
}

func (s *Scheduler) queues() []namedQueue {
	var out []namedQueue
	for _, pool := range sortedKeys(s.PoolQueues) {
		out = append(out, namedQueue{"Pool-" + pool, "pool " + pool, s.PoolQueues[pool]})
	}
	out = append(out, namedQueue{"Events", "events", s.EventsQueue}, namedQueue{"Delay", "delay", s.DelayQueue})
	if s.TriggerQueue != nil {
		out = append(out, namedQueue{"Trigger", "trigger", *s.TriggerQueue})
	}
	return out
}

func (s *Scheduler) addAlarms(p Props) {
	add := func(id string, props *awscloudwatch.AlarmProps) {
		props.TreatMissingData = awscloudwatch.TreatMissingData_NOT_BREACHING
		a := awscloudwatch.NewAlarm(s.Construct, jsii.String(id), props)
		if p.AlarmTopic != nil {
			action := awscloudwatchactions.NewSnsAction(p.AlarmTopic)
			a.AddAlarmAction(action)
			a.AddOkAction(action)
		}
		s.Alarms = append(s.Alarms, a)
	}
	atLeastOne := awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD

	// A message in a DLQ is work the system gave up on: always worth a look.
	for _, q := range s.queues() {
		add("DeadLetters-"+q.id, &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(fmt.Sprintf("runledger: the %s DLQ holds messages; inspect and redrive them", q.label)),
			Metric:             dlqDepth(q.pair.DeadLetter),
			Threshold:          jsii.Number(1),
			ComparisonOperator: atLeastOne,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
	add("InstanceLost", &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("runledger: task instances went LOST (missed heartbeats); check the workers"),
		Metric:             emfMetric("InstanceLost", "Sum", ""),
		Threshold:          jsii.Number(1),
		ComparisonOperator: atLeastOne,
		EvaluationPeriods:  jsii.Number(1),
	})
	if p.RunFailedAlarm {
		add("RunFailed", &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("runledger: runs failed; the event bus's run.failed events name them"),
			Metric:             emfMetric("RunFailed", "Sum", ""),
			Threshold:          jsii.Number(1),
			ComparisonOperator: atLeastOne,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
	// Fifteen minutes above the threshold: a burst that drains is not news.
	add("QueueWaitP99", &awscloudwatch.AlarmProps{
		AlarmDescription: jsii.String(fmt.Sprintf("runledger: queue wait p99 above %s for 15 minutes; add workers or concurrency",
			p.QueueWaitP99Threshold)),
		Metric:             emfMetric("QueueWait", "p99", ""),
		Threshold:          jsii.Number(float64(p.QueueWaitP99Threshold.Milliseconds())),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(3),
		DatapointsToAlarm:  jsii.Number(3),
	})
	for _, name := range FunctionNames() {
		fn, ok := s.Functions[name]
		if !ok {
			continue
		}
		add(exportName(name)+"Errors", &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(fmt.Sprintf("runledger: the %s function failed invocations", name)),
			Metric:             fn.MetricErrors(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}),
			Threshold:          jsii.Number(1),
			ComparisonOperator: atLeastOne,
			EvaluationPeriods:  jsii.Number(1),
		})
		add(exportName(name)+"Throttles", &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(fmt.Sprintf("runledger: the %s function was throttled", name)),
			Metric:             fn.MetricThrottles(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}),
			Threshold:          jsii.Number(1),
			ComparisonOperator: atLeastOne,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
}

// dlqDepth uses SQS's own metric: the functions emit no DLQ metric.
func dlqDepth(q awssqs.IQueue) awscloudwatch.Metric {
	return q.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
		Period:    period,
		Statistic: jsii.String("Maximum"),
	})
}

func (s *Scheduler) addDashboard() {
	graph := func(title string, width float64, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: &left, Width: jsii.Number(width), Height: jsii.Number(6),
		})
	}
	var depth, age, dead []awscloudwatch.IMetric
	for _, q := range s.queues() {
		depth = append(depth, q.pair.Queue.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: period, Statistic: jsii.String("Maximum"), Label: jsii.String(q.label),
		}))
		age = append(age, q.pair.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
			Period: period, Statistic: jsii.String("Maximum"), Label: jsii.String(q.label),
		}))
		dead = append(dead, q.pair.DeadLetter.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
			Period: period, Statistic: jsii.String("Maximum"), Label: jsii.String(q.label + " DLQ"),
		}))
	}
	var invocations, errs, throttles, duration []awscloudwatch.IMetric
	for _, name := range FunctionNames() {
		fn, ok := s.Functions[name]
		if !ok {
			continue
		}
		opts := func(stat string) *awscloudwatch.MetricOptions {
			return &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String(stat), Label: jsii.String(name)}
		}
		invocations = append(invocations, fn.MetricInvocations(opts("Sum")))
		errs = append(errs, fn.MetricErrors(opts("Sum")))
		throttles = append(throttles, fn.MetricThrottles(opts("Sum")))
		duration = append(duration, fn.MetricDuration(opts("p99")))
	}
	apiOpts := func(stat, label string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String(stat), Label: jsii.String(label)}
	}
	alarms := make([]interfacesawscloudwatch.IAlarmRef, len(s.Alarms))
	for i, a := range s.Alarms {
		alarms[i] = a
	}

	s.Dashboard = awscloudwatch.NewDashboard(s.Construct, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
		Widgets: &[]*[]awscloudwatch.IWidget{
			{awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
				Title: jsii.String("runledger alarms"), Alarms: &alarms, Width: jsii.Number(24),
			})},
			{
				graph("Runs ended, tasks failed, deadlines missed", 12,
					emfMetric("RunSucceeded", "Sum", "runs succeeded"), emfMetric("RunFailed", "Sum", "runs failed"),
					emfMetric("TaskFailed", "Sum", "tasks failed"), emfMetric("DeadlineMissed", "Sum", "deadlines missed")),
				graph("Run duration (created -> ended), ms", 12,
					emfMetric("RunDuration", "p50", "p50"), emfMetric("RunDuration", "p99", "p99")),
			},
			{
				graph("Queue wait (QUEUED -> RUNNING), ms", 8,
					emfMetric("QueueWait", "p50", "p50"), emfMetric("QueueWait", "p99", "p99")),
				graph("LOST transitions", 8, emfMetric("InstanceLost", "Sum", "LOST")),
				graph("Dead-letter queues, messages", 8, dead...),
			},
			{
				graph("Queues, visible messages", 12, depth...),
				graph("Queues, oldest message age (s)", 12, age...),
			},
			{
				graph("Invocations", 6, invocations...),
				graph("Errors", 6, errs...),
				graph("Throttles", 6, throttles...),
				graph("Duration p99 (ms)", 6, duration...),
			},
			{
				graph("API requests", 8, s.API.MetricCount(apiOpts("Sum", "requests"))),
				graph("API errors", 8,
					s.API.MetricClientError(apiOpts("Sum", "4xx")), s.API.MetricServerError(apiOpts("Sum", "5xx"))),
				graph("API latency (ms)", 8,
					s.API.MetricLatency(apiOpts("p50", "p50")), s.API.MetricLatency(apiOpts("p99", "p99"))),
			},
		},
	})
}
