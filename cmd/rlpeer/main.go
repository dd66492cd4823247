// Command rlpeer is `make bench-peer`: it starts the Temporal CLI's dev
// server (SQLite in WAL mode, its queue processors' poll rates raised to
// 1,000 a second) on 127.0.0.1, runs the bench's three scenarios against
// it as workflows (a 40-step chain of no-op activities, 1,000
// one-activity workflows of which every tenth fails its first attempt, 50
// timers due at one instant), then runs rlbench's same scenarios, each
// side three times, and prints the medians side by side with their
// ratios and the machine's load.
//
// It lives in a module of its own so that the Temporal SDK and its
// dependencies stay out of runledger's module.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
)

func main() {
	temporalBin := flag.String("temporal", "", "the temporal CLI binary (required)")
	rlbench := flag.String("rlbench", "", "the rlbench binary (required)")
	dir := flag.String("dir", ".runledger/peer", "where the dev server's SQLite file goes")
	rounds := flag.Int("rounds", 3, "runs of each side; each figure is their median")
	flag.Parse()
	if *temporalBin == "" || *rlbench == "" {
		fmt.Fprintln(os.Stderr, "rlpeer: -temporal and -rlbench are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *temporalBin, *rlbench, *dir, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "rlpeer:", err)
		os.Exit(1)
	}
}

// figure is one scenario's measure on both sides.
type figure struct {
	name, unit  string
	rlbenchName string
	// better is "lower" or "higher"; target is the ratio runledger /
	// Temporal the issue asks for, 0 for none.
	better string
	target float64
}

var figures = []figure{
	{name: "chain step (40 no-op steps)", unit: "ms", rlbenchName: "chain_step_ms", better: "lower", target: 0.5},
	{name: "throughput (1,000 one-task runs, 10% failing once)", unit: "runs/s", rlbenchName: "throughput_runs_per_s", better: "higher", target: 3},
	{name: "50 timers due at once, late p99", unit: "ms", rlbenchName: fmt.Sprintf("timer_burst%d_late_p99_ms", timerRuns), better: "lower"},
}

// sample is one round's figures (by rlbenchName) and the load before it.
type sample struct {
	values map[string]float64
	load   string
}

func run(ctx context.Context, temporalBin, rlbench, dir string, rounds int) error {
	peer, err := runTemporal(ctx, temporalBin, dir, rounds)
	if err != nil {
		return err
	}
	ours, err := runRlbench(ctx, rlbench, dir, rounds)
	if err != nil {
		return err
	}
	printTable(peer, ours)
	return nil
}

// loadavg is /proc/loadavg's first three fields ("" where there is none).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// devServerArgs is the tuned dev server's command line: loopback only, no
// UI, a fresh SQLite file in WAL mode, and the history service's queue
// processors polling up to 1,000 times a second (default 20), one
// partition per task queue (a single node gains nothing from more).
func devServerArgs(port, httpPort, metricsPort int, db string) []string {
	args := []string{"server", "start-dev",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(port), "--http-port", strconv.Itoa(httpPort),
		"--metrics-port", strconv.Itoa(metricsPort), "--headless", "--log-level", "error",
		"--db-filename", db, "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
	}
	for _, kv := range []string{
		"history.timerProcessorMaxPollRPS=1000", "history.timerProcessorMaxPollHostRPS=1000",
		"history.transferProcessorMaxPollRPS=1000", "history.transferProcessorMaxPollHostRPS=1000",
		"matching.numTaskqueueReadPartitions=1", "matching.numTaskqueueWritePartitions=1",
	} {
		args = append(args, "--dynamic-config-value", kv)
	}
	return args
}

func runTemporal(ctx context.Context, bin, dir string, rounds int) ([]sample, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	db := filepath.Join(dir, "temporal.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		_ = os.Remove(db + suffix)
	}
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	cmd := exec.Command(bin, devServerArgs(ports[0], ports[1], ports[2], db)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	fmt.Printf("rlpeer: %s %s\n", bin, strings.Join(cmd.Args[1:], " "))
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the dev server: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	if err := waitServing(ctx, addr, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("%w; dev server output:\n%s", err, stderr.String())
	}
	p, err := startTemporalPeer(addr)
	if err != nil {
		return nil, err
	}
	defer p.close()

	var out []sample
	for r := range rounds {
		s := sample{values: map[string]float64{}, load: loadavg()}
		fmt.Printf("rlpeer: temporal round %d of %d (load %s)\n", r+1, rounds, s.load)
		step, err := p.chainStepMs(ctx, 5)
		if err != nil {
			return nil, err
		}
		rate, err := p.throughputRunsPerS(ctx, throughputRuns)
		if err != nil {
			return nil, err
		}
		late, err := p.timerLateP99Ms(ctx, timerRuns)
		if err != nil {
			return nil, err
		}
		s.values[figures[0].rlbenchName], s.values[figures[1].rlbenchName], s.values[figures[2].rlbenchName] = step, rate, late
		fmt.Printf("rlpeer: temporal: chain step %.1f ms, %.1f runs/s, timers late p99 %.0f ms\n", step, rate, late)
		out = append(out, s)
	}
	return out, nil
}

// waitServing dials the dev server until it answers.
func waitServing(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: quietLogger{}})
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dev server at %s not serving within %s: %w", addr, within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// runRlbench runs rlbench's chain, throughput and timer scenarios rounds
// times and reads its BENCH lines.
func runRlbench(ctx context.Context, bin, dir string, rounds int) ([]sample, error) {
	var samples []sample
	for r := range rounds {
		s := sample{values: map[string]float64{}, load: loadavg()}
		fmt.Printf("rlpeer: rlbench round %d of %d (load %s)\n", r+1, rounds, s.load)
		cmd := exec.CommandContext(ctx, bin, "-only", "chain,throughput,timer",
			"-timer-runs", "0", "-timer-burst-runs", strconv.Itoa(timerRuns))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("rlbench: %w\n%s", err, stdout)
		}
		// The whole output (the summary's phases of a chain step) stays
		// beside the figures.
		out := filepath.Join(dir, fmt.Sprintf("rlbench-%d.out", r+1))
		if err := os.WriteFile(out, stdout, 0o644); err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(stdout))
		for sc.Scan() {
			// BENCH <name> value=<number> unit=<unit>
			f := strings.Fields(sc.Text())
			if len(f) < 3 || f[0] != "BENCH" || !strings.HasPrefix(f[2], "value=") {
				continue
			}
			if v, err := strconv.ParseFloat(strings.TrimPrefix(f[2], "value="), 64); err == nil {
				s.values[f[1]] = v
			}
		}
		for _, fg := range figures {
			if _, ok := s.values[fg.rlbenchName]; !ok {
				return nil, errors.New("rlbench printed no BENCH " + fg.rlbenchName)
			}
		}
		fmt.Printf("rlpeer: rlbench: chain step %.1f ms, %.1f runs/s, timers late p99 %.0f ms\n",
			s.values[figures[0].rlbenchName], s.values[figures[1].rlbenchName], s.values[figures[2].rlbenchName])
		samples = append(samples, s)
	}
	return samples, nil
}

func medianOf(samples []sample, name string) (float64, []string) {
	var xs []float64
	var each []string
	for _, s := range samples {
		xs = append(xs, s.values[name])
		each = append(each, strconv.FormatFloat(s.values[name], 'f', 1, 64))
	}
	return median(xs), each
}

func printTable(peer, ours []sample) {
	fmt.Println()
	fmt.Println("| scenario | runledger (local stack) | Temporal dev server (tuned) | ratio runledger/Temporal | target |")
	fmt.Println("| --- | --- | --- | --- | --- |")
	for _, fg := range figures {
		o, oe := medianOf(ours, fg.rlbenchName)
		p, pe := medianOf(peer, fg.rlbenchName)
		target := "-"
		if fg.target > 0 {
			op := "<="
			if fg.better == "higher" {
				op = ">="
			}
			target = fmt.Sprintf("%s %.1fx", op, fg.target)
		}
		fmt.Printf("| %s | %.1f %s (%s) | %.1f %s (%s) | %.2fx | %s |\n",
			fg.name, o, fg.unit, strings.Join(oe, ", "), p, fg.unit, strings.Join(pe, ", "), o/p, target)
	}
	var ol, pl []string
	for _, s := range ours {
		ol = append(ol, s.load)
	}
	for _, s := range peer {
		pl = append(pl, s.load)
	}
	fmt.Printf("\nload (/proc/loadavg 1, 5, 15 min) before each round: Temporal %s; runledger %s; %d CPUs\n",
		strings.Join(pl, " | "), strings.Join(ol, " | "), numCPU())
	fmt.Println("Each figure is the median of the rounds in parentheses.")
}
