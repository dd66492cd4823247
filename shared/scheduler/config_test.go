package scheduler_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/runledger/runledger/shared/jobspec"
	"github.com/runledger/runledger/shared/scheduler"
)

func TestZeroConfigTakesTheDocumentedDefaults(t *testing.T) {
	c := scheduler.Config{}.WithDefaults()
	if c.Now == nil || c.Random == nil || c.Logger == nil {
		t.Errorf("clock, jitter, logger set = %v, %v, %v; want all set", c.Now != nil, c.Random != nil, c.Logger != nil)
	}
	if c.Metrics != io.Discard {
		t.Errorf("metrics = %v, want io.Discard", c.Metrics)
	}
	for _, d := range []struct {
		name      string
		got, want time.Duration
	}{
		{"ClaimWait", c.ClaimWait, 3 * time.Second},
		{"MaxClockSkew", c.MaxClockSkew, 30 * time.Second},
		{"Margin", c.Margin, 2 * time.Second},
		{"TickerPeriod", c.TickerPeriod, time.Minute},
	} {
		if d.got != d.want {
			t.Errorf("%s = %s, want %s", d.name, d.got, d.want)
		}
	}
	if r := c.Random(); r < 0 || r >= 1 {
		t.Errorf("jitter draw %v, want one in [0, 1)", r)
	}
}

func TestWithDefaultsKeepsWhatIsSet(t *testing.T) {
	var metrics strings.Builder
	c := scheduler.Config{ClaimWait: time.Second, MaxClockSkew: time.Minute, Margin: time.Millisecond, TickerPeriod: 5 * time.Minute,
		Random: func() float64 { return 0.5 }, Metrics: &metrics}.WithDefaults()
	if c.ClaimWait != time.Second || c.MaxClockSkew != time.Minute || c.Margin != time.Millisecond || c.TickerPeriod != 5*time.Minute {
		t.Errorf("durations %s %s %s %s, want the ones set", c.ClaimWait, c.MaxClockSkew, c.Margin, c.TickerPeriod)
	}
	if c.Random() != 0.5 || c.Metrics != &metrics {
		t.Error("jitter or metrics replaced by a default")
	}
}

// typedExecutor serves its type and nothing else: a config's check asks
// no more of it.
type typedExecutor struct {
	scheduler.Executor
	typ string
}

func (e typedExecutor) Type() string { return e.typ }

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	lambda := typedExecutor{typ: jobspec.ExecutorLambda}
	for _, tc := range []struct {
		name string
		cfg  scheduler.Config
		says string
	}{
		{"negative claim wait", scheduler.Config{ClaimWait: -time.Second}, "ClaimWait -1s is negative"},
		{"negative skew", scheduler.Config{MaxClockSkew: -time.Second}, "MaxClockSkew -1s is negative"},
		{"negative margin", scheduler.Config{Margin: -time.Second}, "Margin -1s is negative"},
		{"negative ticker period", scheduler.Config{TickerPeriod: -time.Minute}, "TickerPeriod -1m0s is negative"},
		{"pool without a queue", scheduler.Config{Pools: map[string]string{"default": ""}}, `pool "default" has no queue URL`},
		{"pool without a name", scheduler.Config{Pools: map[string]string{"": "https://sqs.example/q"}}, "a pool with no name"},
		{"nil executor", scheduler.Config{Executors: []scheduler.Executor{lambda, nil}}, "Executors[1] is nil"},
		{"executor of the scheduler's own type", scheduler.Config{Executors: []scheduler.Executor{typedExecutor{typ: jobspec.ExecutorSignal}}},
			`serves type "signal", not lambda or ecs`},
		{"two executors of a type", scheduler.Config{Executors: []scheduler.Executor{lambda, typedExecutor{typ: jobspec.ExecutorECS}, lambda}},
			`two executors serve type "lambda"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := scheduler.New(nil, nil, tc.cfg)
			if err == nil || svc != nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New = %v, %v; want no service and an error saying %q", svc, err, tc.says)
			}
		})
	}
	ok := scheduler.Config{Pools: map[string]string{"default": "https://sqs.example/q"},
		Executors: []scheduler.Executor{lambda, typedExecutor{typ: jobspec.ExecutorECS}}}
	if _, err := scheduler.New(nil, nil, ok); err != nil {
		t.Errorf("New of a valid config: %v", err)
	}
}
