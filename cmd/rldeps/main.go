// Command rldeps is the Makefile's deps target: it installs the pinned npm
// packages (`npm ci`) into the repository's node_modules when package.json
// or package-lock.json changed since the last install, under the same file
// lock as the Go tests that install them (shared/emulator), so concurrent
// runs wait and skip what another just did. Written in Go because flock(1)
// is Linux-only.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/runledger/runledger/shared/emulator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "rldeps: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := emulator.FindRoot(wd)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return emulator.InstallTools(ctx, root, log)
}
