// Command runledger is the command line of runledger. `runledger local`
// (what `make run` runs) starts the embedded local stack: DynamoDB Local and
// the SQS emulator, the four handlers behind local adapters, and a demo
// worker pool, with the API on 127.0.0.1:8080.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runledger/runledger/shared/devstack"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "local" {
		fmt.Fprintln(os.Stderr, "usage: runledger local [-addr 127.0.0.1:8080] [-info .runledger/local.json] [-data .runledger/dynamodb] [-v]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("local", flag.ExitOnError)
	addr := fs.String("addr", envOr("RUNLEDGER_ADDR", "127.0.0.1:8080"), "API listen address")
	info := fs.String("info", ".runledger/local.json", "where to write the stack's endpoints")
	verbose := fs.Bool("v", false, "log every handler at info level")
	data := fs.String("data", ".runledger/dynamodb", `where DynamoDB Local keeps the table across restarts ("" for memory only)`)
	_ = fs.Parse(os.Args[2:])
	if err := runLocal(*addr, *info, *data, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "runledger local:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func runLocal(addr, infoPath, dataDir string, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	fmt.Println("runledger: starting DynamoDB Local and the SQS emulator...")
	st, err := devstack.Start(ctx, devstack.Options{ListenAddr: addr, DataDir: dataDir, DemoWorker: true, Logger: logger})
	if err != nil {
		return err
	}
	if err := st.WriteInfo(infoPath); err != nil {
		_ = st.Stop(context.Background())
		return err
	}
	i := st.Info
	fmt.Printf(`
runledger local stack is up.
  API:      %s
  API key:  %s
  DynamoDB: %s (table %s)
  SQS:      %s
  details:  %s

Try it (the demo worker serves pool "demo"):

  export RL=%s KEY=%s
  curl -s -X POST $RL/v1/jobs -H "Authorization: Bearer $KEY" \
       -d '{"name":"hello","pool":"demo","payload":{"sleep":"1s"}}'
  curl -s -X POST $RL/v1/jobs/hello/runs -H "Authorization: Bearer $KEY"
  curl -s "$RL/v1/runs?job=hello" -H "Authorization: Bearer $KEY"
  curl -s $RL/v1/runs/<run id> -H "Authorization: Bearer $KEY"

Ctrl-C stops everything.
`, i.APIURL, i.APIKey, i.DynamoDBEndpoint, i.Table, i.SQSEndpoint, infoPath, i.APIURL, i.APIKey)
	<-ctx.Done()
	fmt.Println("\nrunledger: stopping...")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return st.Stop(sctx)
}
