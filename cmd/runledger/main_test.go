package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// `runledger local` parsed its flags with Go's flag package, which takes
// -addr and --addr alike; every spelling that worked still does.
func TestLocalKeepsSingleDashFlags(t *testing.T) {
	t.Setenv("RUNLEDGER_ADDR", "")
	cases := []struct {
		args             []string
		addr, data, info string
		verbose          bool
	}{
		{[]string{"local"}, "127.0.0.1:8080", ".runledger/dynamodb", ".runledger/local.json", false},
		{[]string{"local", "-addr", "127.0.0.1:9", "-data", "", "-v"}, "127.0.0.1:9", "", ".runledger/local.json", true},
		{[]string{"local", "-addr=127.0.0.1:9", "-data=", "-info=x.json"}, "127.0.0.1:9", "", "x.json", false},
		{[]string{"local", "--addr", "127.0.0.1:9", "--v", "-info", "y.json"}, "127.0.0.1:9", ".runledger/dynamodb", "y.json", true},
		{[]string{"local", "-v=true", "--data", "d"}, "127.0.0.1:8080", "d", ".runledger/local.json", true},
	}
	for _, c := range cases {
		root := newRoot()
		args := singleDashLongFlags(root, c.args)
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		fl := cmd.Flags()
		addr, _ := fl.GetString("addr")
		data, _ := fl.GetString("data")
		info, _ := fl.GetString("info")
		verbose, _ := fl.GetBool("verbose")
		if addr != c.addr || data != c.data || info != c.info || verbose != c.verbose {
			t.Errorf("%q: addr %q data %q info %q verbose %v, want %q %q %q %v", c.args, addr, data, info, verbose, c.addr, c.data, c.info, c.verbose)
		}
	}
}

func TestSingleDashStopsAtDoubleDash(t *testing.T) {
	t.Parallel()
	got := singleDashLongFlags(newRoot(), []string{"local", "-addr", "x", "--", "-data"})
	if strings.Join(got, " ") != "local --addr x -- -data" {
		t.Errorf("got %q", got)
	}
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bogus"},
		{"local", "--nope"},
		{"local", "extra"},
		{"local", "--allow", "sh"}, // exec flags without --exec-pool
		{"worker"},
		{"worker", "exec", "--allow", "sh"}, // no --pool
		{"worker", "exec", "--pool", "p"},   // no --allow
		{"worker", "exec", "--pool", "p", "--allow", "["}, // bad pattern
		{"worker", "exec", "--pool", "p", "--allow", "sh", "--concurrency", "0"},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(stderr, "--help") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a pointer to --help", args, code, stderr)
		}
	}
}

// Every command's help lists its flags and at least one example.
func TestHelpListsFlagsAndExamples(t *testing.T) {
	t.Parallel()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() == "help" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		code, out, _ := runCLI(t, append(path, "--help")...)
		if code != exitOK || !strings.Contains(out, "Flags:") || !strings.Contains(out, "Examples:") {
			t.Errorf("%s --help: exit %d, want 0 with Flags: and Examples:\n%s", c.CommandPath(), code, out)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
}
