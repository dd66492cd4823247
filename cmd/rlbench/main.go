// Command rlbench is `make bench`: it starts the embedded local stack on
// real DynamoDB Local and the fauxqs SQS emulator, runs its own no-op
// workers through the worker SDK, and measures end-to-end latency,
// throughput, timer precision, cost per run and how scheduler passes scale
// with history. It prints one line per figure,
//
//	BENCH <name> value=<number> unit=<unit>
//
// and a short human summary at the end. It asserts nothing about time:
// figures are what this machine did (docs/bench.md says how to read them).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/runledger/runledger/shared/emulator"
)

var scenarioNames = []string{"chain", "throughput", "timer", "cost", "scaling", "events", "map", "flow", "traces"}

func main() {
	only := flag.String("only", strings.Join(scenarioNames, ","), "scenarios to run, comma-separated: "+strings.Join(scenarioNames, ", "))
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (this process: handlers, worker, SDK clients) to this file")
	chainRuns := flag.Int("chain-runs", 5, "measured runs of the chain")
	throughputRuns := flag.Int("throughput-runs", 1000, "runs started in the throughput burst")
	timerRuns := flag.Int("timer-runs", 50, "runs of the timer precision scenario (0: skip it)")
	timerBurstRuns := flag.Int("timer-burst-runs", 1000, "retry timers due at one instant in the timer scenario's burst (0: skip it)")
	scaleRuns := flag.Int("scale-runs", 100000, "finished runs written into the scaling scenario's full table")
	eventRuns := flag.Int("event-runs", 100, "events put one after another in the events scenario")
	mapChildren := flag.Int("map-children", 10000, "children of the map scenario's large map")
	flowRuns := flag.Int("flow-runs", 1000, "runs of each burst of the flow scenario")
	traceRuns := flag.Int("trace-runs", 300, "runs of each of the traces scenario's six bursts (three with OTLP export, three without)")
	verbose := flag.Bool("v", false, "log warnings of the stack and workers to stderr, and add details to the summary")
	flag.Parse()

	want := strings.Split(*only, ",")
	for _, w := range want {
		if !slices.Contains(scenarioNames, w) {
			fmt.Fprintf(os.Stderr, "rlbench: unknown scenario %q (have %s)\n", w, strings.Join(scenarioNames, ", "))
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, want, *cpuProfile, *verbose, scenarioArgs{
		chainRuns: *chainRuns, throughputRuns: *throughputRuns, timerRuns: *timerRuns, scaleRuns: *scaleRuns,
		eventRuns: *eventRuns, timerBurstRuns: *timerBurstRuns, mapChildren: *mapChildren, flowRuns: *flowRuns, traceRuns: *traceRuns,
	}))
}

type scenarioArgs struct {
	chainRuns, throughputRuns, timerRuns, scaleRuns  int
	eventRuns, timerBurstRuns, mapChildren, flowRuns int
	traceRuns                                        int
}

func run(ctx context.Context, want []string, cpuProfile string, verbose bool, args scenarioArgs) int {
	log := newLogger(verbose)
	began := time.Now()
	fmt.Println("rlbench: starting DynamoDB Local and fauxqs...")
	env, err := emulator.Start(ctx, emulator.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlbench:", err)
		return 1
	}
	defer env.Stop()
	fmt.Printf("rlbench: emulators up in %.1f s (DynamoDB Local %s, fauxqs %s)\n",
		time.Since(began).Seconds(), env.DynamoDB().URL, env.SQS().URL)

	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rlbench:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rlbench:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	b := &bench{env: env, log: log, rep: &report{verbose: verbose}, prefix: fmt.Sprintf("rlbench%d-", os.Getpid())}
	scenarios := map[string]func(context.Context) error{
		"chain":      func(ctx context.Context) error { return b.chain(ctx, args.chainRuns) },
		"throughput": func(ctx context.Context) error { return b.throughput(ctx, args.throughputRuns) },
		"timer": func(ctx context.Context) error {
			if args.timerRuns > 0 {
				if err := b.timerPrecision(ctx, args.timerRuns); err != nil || args.timerBurstRuns == 0 {
					return err
				}
				b.dropTables(ctx)
			}
			return b.timerBurst(ctx, args.timerBurstRuns)
		},
		"cost":    b.cost,
		"scaling": func(ctx context.Context) error { return b.scaling(ctx, args.scaleRuns) },
		"events":  func(ctx context.Context) error { return b.events(ctx, args.eventRuns) },
		"map":     func(ctx context.Context) error { return b.mapScenario(ctx, args.mapChildren) },
		"flow":    func(ctx context.Context) error { return b.flow(ctx, args.flowRuns) },
		"traces":  func(ctx context.Context) error { return b.traces(ctx, args.traceRuns) },
	}
	failed := 0
	for _, name := range scenarioNames {
		if !slices.Contains(want, name) || ctx.Err() != nil {
			continue
		}
		t0 := time.Now()
		fmt.Printf("rlbench: %s...\n", name)
		if err := scenarios[name](ctx); err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "rlbench: %s failed: %v\n", name, err)
			b.rep.note("%s: FAILED: %v", name, err)
		}
		fmt.Printf("rlbench: %s took %.1f s\n", name, time.Since(t0).Seconds())
		b.dropTables(context.Background())
	}
	b.rep.printSummary()
	fmt.Printf("rlbench: done in %.1f s\n", time.Since(began).Seconds())
	if failed > 0 || ctx.Err() != nil {
		return 1
	}
	return 0
}
