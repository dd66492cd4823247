package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runledger/runledger/shared/app"
	"github.com/runledger/runledger/shared/devstack"
	"github.com/runledger/runledger/shared/execworker"
	"github.com/runledger/runledger/shared/lambdaexec"
	"github.com/runledger/runledger/shared/worker"
)

type localFlags struct {
	addr, info, data string
	verbose          bool
	exec             execFlags
	execPool         string
	lambdas          []string
	// ecs maps task definition families to local commands (--ecs).
	ecs         []string
	ecsClusters []string
}

func newLocalCmd() *cobra.Command { return localCmd(runLocal) }

// localCmd is the local command running start (tests give their own).
func localCmd(start func(context.Context, io.Writer, localFlags) error) *cobra.Command {
	var f localFlags
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Start the local stack: DynamoDB Local, the SQS emulator, the handlers and a demo worker",
		Long: `local starts the embedded local stack: DynamoDB Local and the SQS emulator,
the four handlers behind local adapters, and a demo worker for pool "demo",
with the API on 127.0.0.1:8080. It writes the endpoints and the API key to
.runledger/local.json, where the other commands find them. Ctrl-C stops
everything.

With --exec-pool it also runs a command-running worker (see 'runledger
worker exec --help') on that pool.

With --lambda NAME=CMD the stack's lambda executor has a function NAME that
jobs may name ({"type": "lambda", "function": "NAME"}): each invocation
claims its attempt, runs CMD as 'runledger task run' does (the payload and
params in RUNLEDGER_PAYLOAD and RUNLEDGER_PARAMS) and completes it. CMD's
arguments are split at spaces and are templates as in 'worker exec', and
CMD's environment is the one 'worker exec' gives (PATH, HOME, LANG, TZ and
TMPDIR of this process's, and the RUNLEDGER_* variables of the attempt).

With --ecs FAMILY=COMMAND it runs the ecs executor's tasks of that task
definition family as local processes of COMMAND (split at spaces; put
anything longer in a script), on the clusters --ecs-cluster names ("local"
by default). The process gets the container's environment (RUNLEDGER_RUN,
RUNLEDGER_TASK, RUNLEDGER_ATTEMPT, RUNLEDGER_CLAIM_NONCE, RUNLEDGER_API_URL), so
COMMAND is typically 'runledger task run -- ...', as in the image.`,
		Example: `  runledger local
  runledger local -addr 127.0.0.1:9090 -data ""
  runledger local --exec-pool shell --allow sh --allow python3 --allow-env DAY
  runledger local --lambda report='python3 /app/report.py --day {{.LogicalDate}}'
  runledger local --ecs "etl=runledger task run -- python3 etl.py"`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return start(cmd.Context(), cmd.OutOrStdout(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", envOr("RUNLEDGER_ADDR", "127.0.0.1:8080"), "API listen address")
	fl.StringVar(&f.info, "info", ".runledger/local.json", "where to write the stack's endpoints")
	fl.StringVar(&f.data, "data", ".runledger/dynamodb", `where DynamoDB Local keeps the table across restarts ("" for memory only)`)
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log every handler at info level")
	fl.StringVar(&f.execPool, "exec-pool", "", "also run a command-running worker on this pool (created if missing)")
	fl.StringArrayVar(&f.lambdas, "lambda", nil, "a local Lambda function NAME=CMD [ARGS...] that lambda executors may invoke (repeatable)")
	f.exec.register(fl, "exec-concurrency")
	fl.StringArrayVar(&f.ecs, "ecs", nil, "run ecs tasks of a task definition family as a local command: FAMILY=COMMAND; repeatable")
	fl.StringArrayVar(&f.ecsClusters, "ecs-cluster", nil, `an ECS cluster jobs may name for the local ecs tasks (default "local"); repeatable`)
	// -v and --v were the flag's names before it was --verbose.
	fl.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "v" {
			name = "verbose"
		}
		return pflag.NormalizedName(name)
	})
	return cmd
}

// options are the stack's: the flags' addresses and data, the demo
// worker, and the exec worker when --exec-pool asks for one.
func (f localFlags) options(logger *slog.Logger) (devstack.Options, error) {
	opts := devstack.Options{ListenAddr: f.addr, DataDir: f.data, DemoWorker: true, Logger: logger}
	if len(f.lambdas) > 0 {
		fns, err := lambdaCommands(f.lambdas, logger)
		if err != nil {
			return opts, err
		}
		opts.Parts = append(opts.Parts, app.LambdaFunctions{Local: fns}.Part())
	}
	if len(f.ecs) > 0 || len(f.ecsClusters) > 0 {
		part, err := f.localECS(logger)
		if err != nil {
			return opts, err
		}
		opts.Parts = append(opts.Parts, part)
	}
	if f.execPool == "" {
		if f.exec.set() {
			return opts, usageErrorf("--allow, --allow-any, --allow-env, --allow-dir, --pass-env, --user, --exec-concurrency and --kill-grace need --exec-pool")
		}
		return opts, nil
	}
	h, err := f.exec.handler()
	if err != nil {
		return opts, err
	}
	exec := app.Worker{Pool: f.execPool, Name: "exec-" + f.execPool, Concurrency: f.exec.concurrency, Handler: h.Handle}
	opts.Parts = append(opts.Parts, exec.Part())
	return opts, nil
}

// lambdaCommands are --lambda's functions: each runs its command for the
// attempt its invocation names, with the exec worker's command runner.
func lambdaCommands(specs []string, logger *slog.Logger) (*lambdaexec.Local, error) {
	// The flag names each command: it needs no allowlist beyond itself.
	allow, err := execworker.NewAllowlist(nil, true)
	if err != nil {
		return nil, err
	}
	h, err := execworker.New(execworker.Config{Allow: allow})
	if err != nil {
		return nil, err
	}
	fns := &lambdaexec.Local{Handlers: map[string]worker.Handler{}, Logger: logger}
	for _, spec := range specs {
		name, command, _ := strings.Cut(spec, "=")
		argv := strings.Fields(command)
		switch {
		case !lambdaName.MatchString(name) || len(argv) == 0:
			return nil, usageErrorf("--lambda %q: want NAME=CMD [ARGS...], NAME of letters, digits, - and _", spec)
		case fns.Handlers[name] != nil:
			return nil, usageErrorf("--lambda %q: function %s is named twice", spec, name)
		}
		fns.Handlers[name] = h.Fixed(argv)
	}
	return fns, nil
}

// lambdaName is the shape of a Lambda function name.
var lambdaName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// localECS is the local ecs executor the --ecs flags register.
func (f localFlags) localECS(logger *slog.Logger) (app.Part, error) {
	if len(f.ecs) == 0 {
		return app.Part{}, usageErrorf("--ecs-cluster needs --ecs FAMILY=COMMAND")
	}
	defs := map[string][]string{}
	for _, d := range f.ecs {
		family, command, ok := strings.Cut(d, "=")
		argv := strings.Fields(command)
		if !ok || family == "" || len(argv) == 0 {
			return app.Part{}, usageErrorf("--ecs %q: want FAMILY=COMMAND", d)
		}
		if _, dup := defs[family]; dup {
			return app.Part{}, usageErrorf("--ecs %q: task definition %q is registered twice", d, family)
		}
		defs[family] = argv
	}
	part, _, err := app.LocalECS{Definitions: defs, Clusters: f.ecsClusters, Logger: logger}.Part()
	if err != nil {
		return app.Part{}, usageErrorf("%s", err)
	}
	return part, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func runLocal(ctx context.Context, out io.Writer, f localFlags) error {
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts, err := f.options(logger)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "runledger: starting DynamoDB Local and the SQS emulator...")
	st, err := devstack.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("local: %w", err)
	}
	if err := st.WriteInfo(f.info); err != nil {
		_ = st.Stop(context.Background())
		return fmt.Errorf("local: %w", err)
	}
	i := st.Info
	fmt.Fprintf(out, `
runledger local stack is up.
  API:       %s
  API key:   %s
  Dashboard: %s (sign in with the API key)
  DynamoDB:  %s (table %s)
  SQS:       %s
  details:   %s
`, i.APIURL, i.APIKey, st.DashboardURL(), i.DynamoDBEndpoint, i.Table, i.SQSEndpoint, f.info)
	if f.execPool != "" {
		fmt.Fprintf(out, "  exec worker: pool %q\n", f.execPool)
	}
	for _, d := range f.ecs {
		fmt.Fprintf(out, "  ecs task definition: %s\n", d)
	}
	fmt.Fprint(out, `
Try it (the demo worker serves pool "demo"; README.md has the walkthrough):

  runledger jobs list
  runledger apply -f job.yaml
  runledger jobs trigger hello --wait

Ctrl-C stops everything.
`)
	<-ctx.Done()
	fmt.Fprintln(out, "\nrunledger: stopping...")
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return st.Stop(sctx)
}

// execFlags are the command-running worker's flags, shared by `worker
// exec` and `local --exec-pool`.
type execFlags struct {
	allow       []string
	allowAny    bool
	allowEnv    []string
	allowDir    []string
	passEnv     []string
	user        string
	concurrency int
	killGrace   time.Duration
	fs          *pflag.FlagSet
	concName    string
}

func (e *execFlags) register(fs *pflag.FlagSet, concurrencyName string) {
	e.fs, e.concName = fs, concurrencyName
	fs.StringArrayVar(&e.allow, "allow", nil, "an executable the worker may run: a bare name from PATH (python3, s*) or a path glob (/srv/bin/*); repeatable")
	fs.BoolVar(&e.allowAny, "allow-any", false, "let the worker run any executable (spell it out: every job's payload becomes a command on this host)")
	fs.StringArrayVar(&e.allowEnv, "allow-env", nil, "a variable a payload's env may set: a name or a glob (REGION, APP_*); a glob admits data variables only: option and hook variables of programs (LD_*, BASH_ENV, PATH, PYTHONPATH, GIT_*, TAR_OPTIONS, CC...) only when named exactly; repeatable (default: none)")
	fs.StringArrayVar(&e.allowDir, "allow-dir", nil, "a directory a payload's dir may be, or be under (symlinks resolved); repeatable (default: only the worker's working directory)")
	fs.StringArrayVar(&e.passEnv, "pass-env", nil, "a variable of the worker's environment that commands get besides PATH, HOME, LANG, TZ and TMPDIR; repeatable")
	fs.StringVar(&e.user, "user", "", "run commands as this user (a name, a uid, or UID:GID), for a worker running as root: the strong form of isolation from the worker's secrets and files (default: the worker's own user)")
	fs.IntVar(&e.concurrency, concurrencyName, 1, "how many commands run at once")
	fs.DurationVar(&e.killGrace, "kill-grace", execworker.DefaultKillGrace, "time between SIGTERM and SIGKILL when a command must stop")
}

// set says whether any exec flag was given.
func (e *execFlags) set() bool {
	for _, n := range []string{"allow", "allow-any", "allow-env", "allow-dir", "pass-env", "user", e.concName, "kill-grace"} {
		if e.fs.Changed(n) {
			return true
		}
	}
	return false
}

func (e *execFlags) handler() (*execworker.Handler, error) {
	if e.concurrency < 1 {
		return nil, usageErrorf("--%s %d: want at least 1", e.concName, e.concurrency)
	}
	if e.killGrace <= 0 {
		return nil, usageErrorf("--kill-grace %s: want a positive duration", e.killGrace)
	}
	a, err := execworker.NewAllowlist(e.allow, e.allowAny)
	if err != nil {
		return nil, usageErrorf("%s", err)
	}
	env, err := execworker.NewEnvAllowlist(e.allowEnv)
	if err != nil {
		return nil, usageErrorf("%s", err)
	}
	dirs, err := execworker.NewDirAllowlist(e.allowDir)
	if err != nil {
		return nil, usageErrorf("%s", err)
	}
	var user *syscall.Credential
	if e.user != "" {
		if user, err = execworker.LookupUser(e.user); err != nil {
			return nil, usageErrorf("--user: %s", err)
		}
	}
	h, err := execworker.New(execworker.Config{Allow: a, AllowEnv: env, AllowDir: dirs, PassEnv: e.passEnv, User: user, KillGrace: e.killGrace})
	if err != nil {
		return nil, usageErrorf("%s", err)
	}
	return h, nil
}
