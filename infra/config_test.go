package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"

	"github.com/runledger/runledger/infra/scheduler"
)

func lookup(values map[string]any) func(string) any {
	return func(key string) any { return values[key] }
}

func TestReadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := readConfig(lookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	// No demo worker unless asked for: it answers success for any task
	// of its pool, real ones included.
	want := config{
		StackName: "Runledger",
		Props: scheduler.Props{
			CodeDir:       "dist",
			RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
		},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestReadConfigValues(t *testing.T) {
	t.Parallel()
	off := false
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   func(*config)
	}{
		{"strings, as -c gives them", map[string]any{
			keyStackName:          "Sched",
			keyCodeDir:            "/opt/dist",
			keyPools:              "gpu, default",
			keyExampleWorkerPool:  "gpu",
			keyTickerRate:         "2m",
			keyReconcilerRate:     "5m",
			keyHistoryRetention:   "720h",
			keyMaxClockSkew:       "45s",
			keyQueueWaitThreshold: "90s",
			keyRemovalPolicy:      "destroy",
			keyDeletionProtection: "false",
			keyAlarmEmail:         "ops@example.com",
			keyJWTIssuer:          "https://issuer.example.com",
			keyJWTAudiences:       "cli,ui",
			keyReserved:           "api=10, worker=0, events=off",
			keyAPIRunRate:         "25",
			keyMaxReceiveCount:    "3",
			keyKeepRetiredIndexes: "true",
			keyECS:                `{"clusters": ["batch"], "taskDefinitions": [{"family": "etl", "taskRoleArn": "arn:aws:iam::123456789012:role/etl"}]}`,
			keyRunFailedAlarm:     "true",
			keyStuckThresholds:    "RUNNING=2h, LOST=30m",
			keyLambda:             `{"functions": ["etl-fn"], "wireOnFailure": true}`,
			keyEventTriggers:      `{"buses": ["default"], "sources": ["shop"]}`,
		}, func(c *config) {
			c.StackName = "Sched"
			c.AlarmEmail = "ops@example.com"
			c.Props = scheduler.Props{
				CodeDir:               "/opt/dist",
				Pools:                 []string{"gpu", "default"},
				ExampleWorkerPool:     "gpu",
				TickerRate:            2 * time.Minute,
				ReconcilerRate:        5 * time.Minute,
				HistoryRetention:      720 * time.Hour,
				MaxClockSkew:          45 * time.Second,
				QueueWaitP99Threshold: 90 * time.Second,
				RemovalPolicy:         awscdk.RemovalPolicy_DESTROY,
				DeletionProtection:    &off,
				JWT:                   &scheduler.JWTAuthorizer{Issuer: "https://issuer.example.com", Audiences: []string{"cli", "ui"}},
				ReservedConcurrency:   map[string]int{"api": 10, "worker": 0, "events": scheduler.Unreserved},
				APIRunRate:            25,
				MaxReceiveCount:       3,
				KeepRetiredIndexes:    true,
				ECS: &scheduler.ECSExecutor{Clusters: []string{"batch"},
					TaskDefinitions: []scheduler.ECSTaskDefinition{{Family: "etl", TaskRoleArn: "arn:aws:iam::123456789012:role/etl"}}},
				RunFailedAlarm:  true,
				StuckThresholds: map[string]time.Duration{"RUNNING": 2 * time.Hour, "LOST": 30 * time.Minute},
				Lambda:          &scheduler.LambdaExecutor{Functions: []string{"etl-fn"}, WireOnFailure: true},
				EventTriggers:   &scheduler.EventTriggers{Buses: []string{"default"}, Sources: []string{"shop"}},
			}
		}},
		{"JSON, as cdk.json gives them", map[string]any{
			keyPools:              []any{"default", "batch"},
			keyExampleWorkerPool:  "none",
			keyDeletionProtection: false,
			keyReserved:           map[string]any{"events": float64(4), "api": "off"},
			keyMaxReceiveCount:    float64(7),
			keyAlarmTopicArn:      "arn:aws:sns:eu-west-1:123456789012:ops",
			keyKeepRetiredIndexes: false,
			keyECS:                map[string]any{"clusters": []any{"a", "b"}, "taskDefinitions": []any{map[string]any{"family": "etl"}}},
			keyLambda:             map[string]any{"functions": []any{"arn:aws:lambda:eu-west-1:123456789012:function:etl"}},
			keyEventTriggers:      map[string]any{"buses": []any{"orders"}, "sources": []any{"shop", "aws.s3"}},
		}, func(c *config) {
			c.AlarmTopicArn = "arn:aws:sns:eu-west-1:123456789012:ops"
			c.Props.Pools = []string{"default", "batch"}
			c.Props.ExampleWorkerPool = ""
			c.Props.DeletionProtection = &off
			c.Props.ReservedConcurrency = map[string]int{"events": 4, "api": scheduler.Unreserved}
			c.Props.MaxReceiveCount = 7
			c.Props.ECS = &scheduler.ECSExecutor{Clusters: []string{"a", "b"}, TaskDefinitions: []scheduler.ECSTaskDefinition{{Family: "etl"}}}
			c.Props.Lambda = &scheduler.LambdaExecutor{Functions: []string{"arn:aws:lambda:eu-west-1:123456789012:function:etl"}}
			c.Props.EventTriggers = &scheduler.EventTriggers{Buses: []string{"orders"}, Sources: []string{"shop", "aws.s3"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readConfig(lookup(tc.values))
			if err != nil {
				t.Fatal(err)
			}
			want, _ := readConfig(lookup(nil))
			tc.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestReadConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := readConfig(lookup(map[string]any{
		keyTickerRate:           "soon",
		keyRemovalPolicy:        "snapshot",
		keyDeletionProtection:   "maybe",
		keyPools:                float64(3),
		keyReserved:             "api",
		keyECS:                  `{"cluster": "typo"}`,
		keyLambda:               `{"function": "etl"}`,
		keyEventTriggers:        `{"bus": "default"}`,
		keyRetiredThrottleRate:  "50",
		keyRetiredThrottleBurst: float64(100),
	}))
	if err == nil {
		t.Fatal("want errors")
	}
	for _, key := range []string{keyTickerRate, keyRemovalPolicy, keyDeletionProtection, keyPools, keyReserved, keyECS, keyLambda, keyEventTriggers, keyRetiredThrottleRate, keyRetiredThrottleBurst} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s: %v", key, err)
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ base, path, want string }{
		{"..", "dist", "../dist"},
		{"..", "/abs/dist", "/abs/dist"},
		{".", "dist", "dist"},
		{"..", "", ""},
	} {
		if got := resolve(tc.base, tc.path); got != tc.want {
			t.Errorf("resolve(%q, %q) = %q, want %q", tc.base, tc.path, got, tc.want)
		}
	}
}
