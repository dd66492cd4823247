package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runledger/runledger/client"
)

// apiFlags are the flags of every command that calls the API.
type apiFlags struct {
	url, key, stack, region, info string
	output                        string
	insecure                      bool
}

// register adds the flags to a command group (persistent, so every
// subcommand has them) or to a single command.
func (a *apiFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&a.url, "api-url", "", "the API's base URL (default: --stack's ApiUrl output, RUNLEDGER_API_URL, RUNLEDGER_STACK's, or .runledger/local.json)")
	fs.StringVar(&a.key, "api-key", "", "the local stack's API key (default: RUNLEDGER_API_KEY or .runledger/local.json; without one, SigV4)")
	fs.StringVar(&a.stack, "stack", "", "the CDK stack whose ApiUrl output is the API (default: RUNLEDGER_STACK)")
	fs.StringVar(&a.region, "region", "", "the SigV4 signing region (default: the stack's or the AWS configuration's)")
	fs.StringVar(&a.info, "info", "", "the local stack's file (default: .runledger/local.json here or in a parent folder)")
	fs.StringVarP(&a.output, "output", "o", "table", "table for people, json for scripts")
	fs.BoolVar(&a.insecure, "insecure", false, "allow sending the API key over plain http to a host other than 127.0.0.1, ::1 or localhost")
}

func (a *apiFlags) client(cmd *cobra.Command) (*client.Client, error) {
	if err := a.checkOutput(); err != nil {
		return nil, err
	}
	return client.New(cmd.Context(), client.Options{URL: a.url, APIKey: a.key, Stack: a.stack, Region: a.region, LocalInfo: a.info, Insecure: a.insecure})
}

func (a *apiFlags) checkOutput() error {
	if a.output != "table" && a.output != "json" {
		return usageErrorf("--output %q: want table or json", a.output)
	}
	return nil
}

func (a *apiFlags) json() bool { return a.output == "json" }

// describe is an error as the user reads it: an API error as its code and
// the server's sentence.
func describe(err error) string {
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		code := apiErr.Code
		if code == "" {
			code = fmt.Sprintf("HTTP %d", apiErr.Status)
		}
		return fmt.Sprintf("%s: %s (%s)", code, apiErr.Message, apiErr.Op)
	}
	return err.Error()
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns; rows are tab-separated.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// when is a time for a table: local-free UTC, seconds, or "-".
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// ms is a duration in milliseconds for a table, or "-".
func ms(v *int64) string {
	if v == nil {
		return "-"
	}
	d := time.Duration(*v) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
