package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"

	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/localinfo"
	"github.com/runledger/runledger/shared/queue"
	"github.com/runledger/runledger/shared/worker"
)

func newWorkerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "worker",
		Short:   "Run a worker pool",
		Example: `  runledger worker exec --pool shell --allow python3`,
		Args:    noArgs,
		RunE:    showHelp,
	}
	cmd.AddCommand(newWorkerExecCmd())
	return cmd
}

type workerExecFlags struct {
	pool, name, info                    string
	apiURL, queueURL, eventsURL, sqsURL string
	verbose                             bool
	exec                                execFlags
}

func newWorkerExecCmd() *cobra.Command {
	var f workerExecFlags
	cmd := &cobra.Command{
		Use:   "exec --pool POOL --allow PATTERN... [--concurrency N]",
		Short: "Run the commands that tasks' payloads name, as a worker of a pool",
		Long: `exec claims the attempts of a pool like any worker and runs the command the
task's payload names:

  {"command": ["python3", "etl.py", "--day", "{{.LogicalDate}}"],
   "env": {"REGION": "{{.Params.region}}"}, "dir": "/srv/etl",
   "permanent_exit_codes": [2]}

Arguments, env values and dir are Go templates over .Job, .Run, .Task,
.Attempt, .LogicalTime (RFC 3339), .LogicalDate (YYYY-MM-DD, UTC) and
.Params; each renders to 128 KiB at most. The process gets PATH, HOME,
LANG, TZ and TMPDIR of this worker's environment, the variables --pass-env
names, the payload's env, and RUNLEDGER_JOB, RUNLEDGER_RUN, RUNLEDGER_TASK,
RUNLEDGER_ATTEMPT, RUNLEDGER_LOGICAL_TIME and, where the ledger is a
DynamoDB table, RUNLEDGER_FENCE (the attempt's fence as JSON, for the
command's own TransactWriteItems: docs/workers.md, "Exactly-once
effects"); never the rest of this
worker's environment, nor the attempt's token (this worker claims,
heartbeats and completes). Once it has read its AWS credentials and API
key, this worker drops them from its environment and, on Linux, makes
itself undumpable, so that a command of its user can read neither its
/proc/<pid>/environ nor its memory. --user runs the commands as another
user (this worker running as root): the strong form, which also closes
to them the files only this worker's user may read.

Only executables an --allow pattern admits run; others fail permanently
with category command_not_allowed. A bare name (python3, s*) admits a
command looked up in PATH; a pattern with a slash (/srv/bin/*) admits an
absolute path once its symlinks are resolved: a pattern over a folder
others can write admits whatever they write there. Arguments never pass
through a shell.

A payload's env names must match an --allow-env pattern (none by default),
and its dir must be this worker's working directory or under an
--allow-dir (symlinks resolved). A glob in --allow-env is for data
variables: the variables that change what a command loads or runs or how a
program is configured (LD_*, DYLD_*, BASH_ENV, ENV, PATH, HOME, TMPDIR,
IFS, PS4, PYTHON*, NODE_OPTIONS, PERL5*, RUBYOPT, JAVA_TOOL_OPTIONS, GIT_*,
TAR_OPTIONS, RSYNC_*, GOFLAGS, CC, MAKEFILES, KUBECONFIG, ...) are
admitted only when an --allow-env names them exactly, RUNLEDGER_* never. A
refused payload fails permanently with category invalid_payload and
nothing runs.

Exit 0 is success; another status fails the attempt with its exit_code,
retryable unless listed in permanent_exit_codes, with the tail of stderr as
the reason. Output lines go to this worker's log (per attempt 1000 at
once, then 100 a second; a last line counts the ones dropped). A cancel
request, the run timeout or a lost lease send SIGTERM to the process
group, then SIGKILL after --kill-grace.

The API and queues come from flags, else RUNLEDGER_API_URL,
RUNLEDGER_POOL_QUEUE_URL and RUNLEDGER_EVENTS_QUEUE_URL, else
.runledger/local.json. Completions go to the API's complete route, and to
the events queue only when the API cannot be reached.`,
		Example: `  runledger worker exec --pool shell --allow python3 --allow /srv/etl/bin/*
  runledger worker exec --pool etl --allow /srv/etl/bin/* --allow-env REGION --allow-env 'ETL_*' --allow-dir /srv/etl --pass-env AWS_PROFILE
  runledger worker exec --pool batch --concurrency 4 --allow-any
  sudo runledger worker exec --pool shell --allow python3 --user etl`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorkerExec(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.pool, "pool", "", "the pool whose attempts this worker runs (required)")
	fl.StringVar(&f.name, "name", "", "the worker's name in claims (default: the host name)")
	fl.StringVar(&f.info, "info", "", "the local stack's file, for what flags and environment leave unset (default: .runledger/local.json here or in a parent folder)")
	fl.StringVar(&f.apiURL, "api-url", "", "the API's base URL")
	fl.StringVar(&f.queueURL, "queue-url", "", "the pool's dispatch queue URL")
	fl.StringVar(&f.eventsURL, "events-queue-url", "", "the events queue URL")
	fl.StringVar(&f.sqsURL, "sqs-endpoint", "", "an SQS endpoint other than AWS's (the local emulator)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log at debug level")
	f.exec.register(fl, "concurrency")
	return cmd
}

// workerEndpoints is where a worker reaches the API and its queues.
type workerEndpoints struct {
	apiURL, poolQueue, eventsQueue, sqsEndpoint, region string
}

// resolve fills each endpoint from its flag, its environment variable, or
// the local stack's file, in that order.
func (f workerExecFlags) resolve() (workerEndpoints, error) {
	e := workerEndpoints{
		apiURL:      first(f.apiURL, os.Getenv("RUNLEDGER_API_URL")),
		poolQueue:   first(f.queueURL, os.Getenv("RUNLEDGER_POOL_QUEUE_URL")),
		eventsQueue: first(f.eventsURL, os.Getenv("RUNLEDGER_EVENTS_QUEUE_URL")),
		sqsEndpoint: f.sqsURL,
	}
	if e.apiURL == "" || e.poolQueue == "" || e.eventsQueue == "" {
		info, err := readLocalInfo(f.info)
		if err != nil && (f.info != "" || !errors.Is(err, fs.ErrNotExist)) {
			return e, err
		}
		if err == nil {
			e.apiURL = first(e.apiURL, info.APIURL)
			e.poolQueue = first(e.poolQueue, info.Queues[f.pool])
			e.eventsQueue = first(e.eventsQueue, info.Queues["events"])
			e.sqsEndpoint = first(e.sqsEndpoint, info.SQSEndpoint)
			e.region = info.Region
		}
	}
	switch {
	case e.apiURL == "":
		return e, usageErrorf("no API URL: give --api-url, set RUNLEDGER_API_URL, or start 'runledger local'")
	case e.poolQueue == "":
		return e, usageErrorf("no queue for pool %q: give --queue-url or set RUNLEDGER_POOL_QUEUE_URL", f.pool)
	case e.eventsQueue == "":
		return e, usageErrorf("no events queue: give --events-queue-url or set RUNLEDGER_EVENTS_QUEUE_URL")
	}
	return e, nil
}

// readLocalInfo reads the local stack's file at path, or the one found
// from the working directory up; fs.ErrNotExist when there is none.
func readLocalInfo(path string) (localinfo.Info, error) {
	if path == "" {
		wd, err := os.Getwd()
		if err != nil {
			return localinfo.Info{}, err
		}
		if path, err = localinfo.Find(wd); err != nil {
			return localinfo.Info{}, err
		}
	}
	return localinfo.Read(path)
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func runWorkerExec(ctx context.Context, f workerExecFlags) error {
	if f.pool == "" {
		return usageErrorf("--pool is required")
	}
	h, err := f.exec.handler()
	if err != nil {
		return err
	}
	ep, err := f.resolve()
	if err != nil {
		return err
	}
	sq, err := sqsClient(ctx, ep)
	if err != nil {
		return err
	}
	// The AWS configuration and the handler have read what they need of
	// the environment: the secrets leave it before the first command runs.
	if err := execworker.HideSecrets(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	w, err := worker.New(worker.Config{
		APIURL: ep.apiURL, PoolQueueURL: ep.poolQueue, EventsQueueURL: ep.eventsQueue,
		Name: f.name, Concurrency: f.exec.concurrency, Queue: queue.New(sq), Logger: log,
	}, h.Handle)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// sqsClient talks to AWS with the standard credential chain, or to the
// endpoint given (the local emulator, which takes any credentials).
func sqsClient(ctx context.Context, ep workerEndpoints) (*sqs.Client, error) {
	var opts []func(*config.LoadOptions) error
	if ep.region != "" {
		opts = append(opts, config.WithRegion(ep.region))
	}
	if ep.sqsEndpoint != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
		if ep.region == "" {
			opts = append(opts, config.WithRegion("us-east-1"))
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS SDK config: %w", err)
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if ep.sqsEndpoint != "" {
			o.BaseEndpoint = aws.String(ep.sqsEndpoint)
		}
	}), nil
}
