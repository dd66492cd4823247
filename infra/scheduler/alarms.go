package scheduler

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/runledger/runledger/statemodel"
)

// MetricNamespace holds the metrics the functions emit in CloudWatch EMF
// (docs/wiring.md, "Metrics"); the alarms read InstanceLost (Count, one
// per transition to LOST), QueueWait (Milliseconds, one per QUEUED ->
// RUNNING) and RunFailed (Count, one per failed run), without dimensions,
// and ApiThrottled, which the API's access log gives (apiThrottled).
const MetricNamespace = "Runledger"

// MetricOverdueInState and StateDimension name the ticker's and the
// reconciler's per-pass metric (the scheduler's MetricOverdueInState): how
// long the most overdue instance timer listed in a state has been due.
const (
	MetricOverdueInState = "OverdueInState"
	StateDimension       = "State"
)

// StuckStates are the states an instance can be stuck in with a timer
// that falls due: every non-terminal state but PAUSED, which an operator
// holds and no timer leaves.
func StuckStates() []string {
	var out []string
	for _, st := range statemodel.AllStates() {
		if !st.Terminal() && st != statemodel.StatePaused {
			out = append(out, string(st))
		}
	}
	return out
}

// overdueMetric is MetricOverdueInState of one state, its maximum over the
// alarm period.
func overdueMetric(state, label string) awscloudwatch.Metric {
	props := &awscloudwatch.MetricProps{
		Namespace:     jsii.String(MetricNamespace),
		MetricName:    jsii.String(MetricOverdueInState),
		DimensionsMap: &map[string]*string{StateDimension: jsii.String(state)},
		Statistic:     jsii.String("Maximum"),
		Period:        period,
	}
	if label != "" {
		props.Label = jsii.String(label)
	}
	return awscloudwatch.NewMetric(props)
}

// QueueAgeThreshold raises a queue's age alarm when its oldest message
// waits longer: twice SQS's longest delay (15 minutes, which the delay
// queue's timers may wait before they can be received), so only a queue
// nothing drains, a pool without workers say, reaches it.
const QueueAgeThreshold = 30 * time.Minute

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
	// A message that waits is work nobody takes: a pool without workers,
	// a consumer failing before it can report.
	for _, q := range s.queues() {
		add("OldestMessage-"+q.id, &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("runledger: the %s queue's oldest message waited over %s; check its consumers", q.label, QueueAgeThreshold)),
			Metric: q.pair.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
				Period: period, Statistic: jsii.String("Maximum"),
			}),
			Threshold:          jsii.Number(QueueAgeThreshold.Seconds()),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
	s.addTableAlarms(p, add)
	s.addAPIAlarms(add)
	add("InstanceLost", &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("runledger: task instances went LOST (missed heartbeats); check the workers"),
		Metric:             emfMetric("InstanceLost", "Sum", ""),
		Threshold:          jsii.Number(1),
		ComparisonOperator: atLeastOne,
		EvaluationPeriods:  jsii.Number(1),
	})
	if p.RunFailedAlarm {
		add("RunFailed", &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String("runledger: runs failed; the event bus's run.failed notices name them"),
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
	// A timer the passes list again and again is an instance its owner
	// cannot move: stuck in its state.
	for _, st := range StuckStates() {
		limit := p.StuckThresholds[st]
		add("Stuck-"+st, &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("runledger: a %s task instance's timer fell due over %s ago and it is still %s; "+
				"the ticker's or reconciler's log names it", st, limit, st)),
			Metric:             overdueMetric(st, ""),
			Threshold:          jsii.Number(limit.Seconds()),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
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

type addAlarm func(id string, props *awscloudwatch.AlarmProps)

// addTableAlarms alarms on throttling of the table and of each index.
// DynamoDB throttles a partition past its limits even on demand (the heat
// model, docs/bench.md), and an index that cannot keep up throttles the
// table's writes: either means the load outgrew the layout.
func (s *Scheduler) addTableAlarms(p Props, add addAlarm) {
	throttled := func(dims map[string]*string) awscloudwatch.IMetric {
		metric := func(name string) awscloudwatch.IMetric {
			return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
				Namespace: jsii.String("AWS/DynamoDB"), MetricName: jsii.String(name),
				DimensionsMap: &dims, Statistic: jsii.String("Sum"), Period: period,
			})
		}
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression: jsii.String("reads + writes"),
			UsingMetrics: &map[string]awscloudwatch.IMetric{
				"reads": metric("ReadThrottleEvents"), "writes": metric("WriteThrottleEvents"),
			},
			Label:  jsii.String("throttle events"),
			Period: period,
		})
	}
	alarm := func(id, what string, dims map[string]*string) {
		add(id, &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(fmt.Sprintf("runledger: DynamoDB throttled requests on %s; a partition is past its limits", what)),
			Metric:             throttled(dims),
			Threshold:          jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
		})
	}
	table := s.Table.TableName()
	alarm("TableThrottled", "the table", map[string]*string{"TableName": table})
	for _, ix := range tableIndexes(p) {
		alarm("TableThrottled-"+ix.Name, "the index "+ix.Name,
			map[string]*string{"TableName": table, "GlobalSecondaryIndexName": jsii.String(ix.Name)})
	}
}

// addAPIAlarms alarms on the API's 5xx answers (the api function failing
// or timing out) and on its 429s, the route throttles refusing requests
// (throttle.go): past the runs a second they admit, or a flood. HTTP APIs
// publish no 429 metric, so a filter on the access log counts them.
func (s *Scheduler) addAPIAlarms(add addAlarm) {
	add("Api5xx", &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("runledger: the HTTP API answered 5xx; check the api function's errors and duration"),
		Metric:             s.API.MetricServerError(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
	})
	throttled := awslogs.NewMetricFilter(s.Construct, jsii.String("ApiThrottledFilter"), &awslogs.MetricFilterProps{
		LogGroup:        s.AccessLogs,
		FilterPattern:   awslogs.FilterPattern_StringValue(jsii.String("$.status"), jsii.String("="), jsii.String("429")),
		MetricNamespace: jsii.String(MetricNamespace),
		MetricName:      jsii.String(apiThrottled),
		MetricValue:     jsii.String("1"),
	})
	add("Api429", &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String("runledger: the HTTP API's route throttles answered 429; see the access log's routeKey for which route"),
		Metric:             throttled.Metric(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}),
		Threshold:          jsii.Number(1),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
		EvaluationPeriods:  jsii.Number(1),
	})
}

// apiThrottled is the metric of the access log's 429 lines.
const apiThrottled = "ApiThrottled"

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
	var overdue []awscloudwatch.IMetric
	for _, st := range StuckStates() {
		overdue = append(overdue, overdueMetric(st, st))
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
				graph("Overdue in state (s): the most overdue timer a pass listed", 12, overdue...),
				graph("Transition lag (ms) and completion deviation (ms)", 12,
					emfMetric("TransitionLag", "p99", "lag p99"), emfMetric("CompletionDeviation", "Average", "deviation avg"),
					emfMetric("CompletionDeviation", "Maximum", "deviation max")),
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
