package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"

	"github.com/runledger/runledger/infra/scheduler"
)

// config is what the app reads from CDK context (cdk.json, or
// `cdk synth -c runledger:pools=default,gpu`). Every key is optional.
type config struct {
	StackName     string
	AlarmEmail    string
	AlarmTopicArn string
	Props         scheduler.Props
}

// Context keys. Values given with -c arrive as strings; values in cdk.json
// may also be JSON lists, booleans or objects.
const (
	keyStackName          = "runledger:stackName"          // default Runledger
	keyCodeDir            = "runledger:codeDir"            // default dist, relative to cdk.json's folder
	keyPools              = "runledger:pools"              // "default,gpu" or ["default","gpu"]
	keyExampleWorkerPool  = "runledger:exampleWorkerPool"  // default none: no demo worker
	keyTickerRate         = "runledger:tickerRate"         // Go duration, whole minutes
	keyReconcilerRate     = "runledger:reconcilerRate"     // Go duration, whole minutes
	keyHistoryRetention   = "runledger:historyRetention"   // Go duration
	keyMaxClockSkew       = "runledger:maxClockSkew"       // Go duration
	keyQueueWaitThreshold = "runledger:queueWaitP99"       // Go duration
	keyRemovalPolicy      = "runledger:removalPolicy"      // retain (default) or destroy
	keyDeletionProtection = "runledger:deletionProtection" // true (default) or false
	keyKeepRetiredIndexes = "runledger:keepRetiredIndexes" // false (default) or true: deploy 1 of an index migration
	keyAlarmEmail         = "runledger:alarmEmail"         // creates a topic with this subscriber
	keyAlarmTopicArn      = "runledger:alarmTopicArn"      // an existing topic
	keyJWTIssuer          = "runledger:jwtIssuer"
	keyJWTAudiences       = "runledger:jwtAudiences"        // "a,b" or ["a","b"]
	keyReserved           = "runledger:reservedConcurrency" // default none; api=20,worker=off (off: unreserved)
	keyAPIRunRate         = "runledger:apiRunRate"          // runs a second the route throttles admit, default 1000
	keyStuckThresholds    = "runledger:stuckThresholds"     // STATE=duration,...; default 15m each (Props.StuckThresholds)
	// The stage throttle's keys, refused since the throttles are per route.
	keyRetiredThrottleRate  = "runledger:apiThrottleRate"
	keyRetiredThrottleBurst = "runledger:apiThrottleBurst"
	keyMaxReceiveCount      = "runledger:maxReceiveCount"
	// keyECS allows the ecs executor: {"clusters": ["batch"],
	// "taskDefinitions": [{"family": "etl", "taskRoleArn": "...",
	// "executionRoleArn": "..."}]}, an object in cdk.json or its JSON as
	// a string with -c.
	keyECS            = "runledger:ecs"
	keyRunFailedAlarm = "runledger:runFailedAlarm" // false (default) or true: an alarm on any failed run
	// keyLambda allows the lambda executor: {"functions": ["etl", "arn:..."],
	// "wireOnFailure": true}, an object in cdk.json or its JSON as a string
	// with -c.
	keyLambda = "runledger:lambda"
	// keyEventTriggers names the buses and sources whose events may start
	// runs: {"buses": ["default"], "sources": ["shop"]}, an object in
	// cdk.json or its JSON as a string with -c.
	keyEventTriggers = "runledger:eventTriggers"
)

// readConfig builds the app's configuration from a context lookup (the
// app's node.TryGetContext), reporting every bad value at once.
func readConfig(get func(key string) any) (config, error) {
	var errs []error
	fail := func(key string, err error) { errs = append(errs, fmt.Errorf("context %s: %w", key, err)) }
	str := func(key, def string) string {
		switch v := get(key).(type) {
		case nil:
			return def
		case string:
			return v
		default:
			fail(key, fmt.Errorf("want a string, got %v", v))
			return def
		}
	}
	list := func(key string) []string {
		switch v := get(key).(type) {
		case nil:
			return nil
		case string:
			var out []string
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
			return out
		case []any:
			var out []string
			for _, item := range v {
				s, ok := item.(string)
				if !ok {
					fail(key, fmt.Errorf("want a list of strings, got %v", v))
					return nil
				}
				out = append(out, s)
			}
			return out
		default:
			fail(key, fmt.Errorf("want a list of strings, got %v", v))
			return nil
		}
	}
	duration := func(key string) time.Duration {
		s := str(key, "")
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			fail(key, err)
		}
		return d
	}
	boolean := func(key string) *bool {
		switch v := get(key).(type) {
		case nil:
			return nil
		case bool:
			return &v
		case string:
			b, err := strconv.ParseBool(v)
			if err != nil {
				fail(key, err)
				return nil
			}
			return &b
		default:
			fail(key, fmt.Errorf("want true or false, got %v", v))
			return nil
		}
	}
	number := func(key string, v any) int {
		switch n := v.(type) {
		case nil:
			return 0
		case float64:
			return int(n)
		case string:
			i, err := strconv.Atoi(n)
			if err != nil {
				fail(key, err)
			}
			return i
		default:
			fail(key, fmt.Errorf("want a number, got %v", v))
			return 0
		}
	}

	// reservation reads a reserved concurrency: a count, or "off".
	reservation := func(v any) int {
		if s, ok := v.(string); ok && strings.TrimSpace(s) == "off" {
			return scheduler.Unreserved
		}
		return number(keyReserved, v)
	}

	c := config{
		StackName:     str(keyStackName, "Runledger"),
		AlarmEmail:    str(keyAlarmEmail, ""),
		AlarmTopicArn: str(keyAlarmTopicArn, ""),
	}
	p := &c.Props
	p.CodeDir = str(keyCodeDir, "dist")
	p.Pools = list(keyPools)
	// The demo worker answers success for whatever task reaches it, so a
	// stack gets one only on the pool named here ("none" names none, as
	// leaving the key out does).
	if w := str(keyExampleWorkerPool, ""); w != "none" {
		p.ExampleWorkerPool = w
	}
	p.TickerRate = duration(keyTickerRate)
	p.ReconcilerRate = duration(keyReconcilerRate)
	p.HistoryRetention = duration(keyHistoryRetention)
	p.MaxClockSkew = duration(keyMaxClockSkew)
	p.QueueWaitP99Threshold = duration(keyQueueWaitThreshold)
	switch rp := strings.ToLower(str(keyRemovalPolicy, "retain")); rp {
	case "retain":
		p.RemovalPolicy = awscdk.RemovalPolicy_RETAIN
	case "destroy":
		p.RemovalPolicy = awscdk.RemovalPolicy_DESTROY
	default:
		fail(keyRemovalPolicy, fmt.Errorf("%q: want retain or destroy", rp))
	}
	p.DeletionProtection = boolean(keyDeletionProtection)
	if keep := boolean(keyKeepRetiredIndexes); keep != nil {
		p.KeepRetiredIndexes = *keep
	}
	if alarm := boolean(keyRunFailedAlarm); alarm != nil {
		p.RunFailedAlarm = *alarm
	}
	if issuer := str(keyJWTIssuer, ""); issuer != "" {
		p.JWT = &scheduler.JWTAuthorizer{Issuer: issuer, Audiences: list(keyJWTAudiences)}
	}
	p.MaxReceiveCount = number(keyMaxReceiveCount, get(keyMaxReceiveCount))
	p.APIRunRate = float64(number(keyAPIRunRate, get(keyAPIRunRate)))
	// The one stage throttle these set gave way to a throttle per route: a
	// stack that still sets them would lose its limit without a word.
	for _, gone := range []string{keyRetiredThrottleRate, keyRetiredThrottleBurst} {
		if get(gone) != nil {
			fail(gone, fmt.Errorf("no longer read: set %s (runs a second; each route's throttle is sized from it, docs/deploy.md)", keyAPIRunRate))
		}
	}
	switch v := get(keyReserved).(type) {
	case nil:
	case string: // api=10,worker=5
		p.ReservedConcurrency = map[string]int{}
		for _, kv := range strings.Split(v, ",") {
			name, n, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				fail(keyReserved, fmt.Errorf("%q: want name=count", kv))
				continue
			}
			p.ReservedConcurrency[name] = reservation(n)
		}
	case map[string]any: // {"api": 10, "worker": "off"}
		p.ReservedConcurrency = map[string]int{}
		for name, n := range v {
			p.ReservedConcurrency[name] = reservation(n)
		}
	default:
		fail(keyReserved, fmt.Errorf("want name=count,... or an object, got %v", v))
	}
	if v := str(keyStuckThresholds, ""); v != "" {
		p.StuckThresholds = map[string]time.Duration{}
		for _, kv := range strings.Split(v, ",") {
			state, d, ok := strings.Cut(strings.TrimSpace(kv), "=")
			limit, err := time.ParseDuration(strings.TrimSpace(d))
			if !ok || err != nil {
				fail(keyStuckThresholds, fmt.Errorf("%q: want STATE=duration, such as RUNNING=2h", kv))
				continue
			}
			p.StuckThresholds[strings.TrimSpace(state)] = limit
		}
	}
	p.ECS = readObject[scheduler.ECSExecutor](get(keyECS), `{"clusters": [...], "taskDefinitions": [...]}`, func(err error) { fail(keyECS, err) })
	p.Lambda = readObject[scheduler.LambdaExecutor](get(keyLambda), `{"functions": [...], "wireOnFailure": true}`, func(err error) { fail(keyLambda, err) })
	p.EventTriggers = readObject[scheduler.EventTriggers](get(keyEventTriggers), `{"buses": [...], "sources": [...]}`, func(err error) { fail(keyEventTriggers, err) })
	return c, errors.Join(errs...)
}

// readObject reads an executor's allow-list: a JSON object in cdk.json, or
// its text with -c; shape is what the error shows. Unknown fields are
// refused.
func readObject[T any](v any, shape string, fail func(error)) *T {
	var raw []byte
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		raw = []byte(v)
	case map[string]any:
		raw, _ = json.Marshal(v)
	default:
		fail(fmt.Errorf("want an object %s, got %v", shape, v))
		return nil
	}
	var e T
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		fail(err)
		return nil
	}
	return &e
}

// projectFile finds the repository's cdk.json (in the working directory or
// its parent: the CLI runs the app as `cd infra && go run .`) and returns
// its directory, where the CLI itself runs, and its "context" object.
// Loading that context here makes `go run .` without the CLI synthesize
// with the same feature flags as `cdk synth`; the CLI's own context, when
// present, takes precedence. Without a cdk.json the directory is ".".
func projectFile() (dir string, context map[string]any, err error) {
	for _, dir := range []string{".", ".."} {
		path := filepath.Join(dir, "cdk.json")
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read %s: %w", path, err)
		}
		var file struct {
			Context map[string]any `json:"context"`
		}
		if err := json.Unmarshal(data, &file); err != nil {
			return "", nil, fmt.Errorf("parse %s: %w", path, err)
		}
		return dir, file.Context, nil
	}
	return ".", nil, nil
}

// resolve makes a relative path relative to base; absolute paths stay.
func resolve(base, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(base, path)
}
