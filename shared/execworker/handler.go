package execworker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// DefaultKillGrace is how long a process group has between SIGTERM and
// SIGKILL.
const DefaultKillGrace = 10 * time.Second

// outputDrain bounds how long output still arriving from the process group
// is read after the process exits and the group is killed.
const outputDrain = 2 * time.Second

// Default output line limits: see Config.OutputBurst.
const (
	DefaultOutputBurst     = 1000
	DefaultOutputPerSecond = 100
)

// Config configures a Handler.
type Config struct {
	// Allow says which executables may run.
	Allow Allowlist
	// AllowEnv says which variables a payload's env may set (the zero
	// value: none).
	AllowEnv EnvAllowlist
	// AllowDir says which dir a payload may name (the zero value: only
	// the worker's working directory).
	AllowDir DirAllowlist
	// KillGrace is the time between SIGTERM and SIGKILL. Default
	// DefaultKillGrace.
	KillGrace time.Duration
	// Environ is the worker's environment, what a command's is taken
	// from. Default os.Environ().
	Environ []string
	// PassEnv names variables of Environ that commands get besides
	// BaseEnv.
	PassEnv []string
	// InheritEnv gives commands all of Environ but its RUNLEDGER_*
	// variables, instead of BaseEnv and PassEnv: for a process whose
	// whole environment is the operator's (a container's).
	InheritEnv bool
	// OutputBurst and OutputPerSecond cap the output lines logged per
	// attempt: OutputBurst at once, then OutputPerSecond a second; the
	// lines over the cap are counted and the count logged at the end.
	// Defaults DefaultOutputBurst and DefaultOutputPerSecond.
	OutputBurst     int
	OutputPerSecond float64
	// Now is the clock of the output cap. Default time.Now.
	Now func() time.Time
	// User, when set, is the uid and groups commands run as (LookupUser),
	// for a worker running as root: another user's commands can read
	// neither the worker's /proc entries nor its files (the local
	// stack's .runledger/local.json among them). Default: the worker's
	// own user.
	User *syscall.Credential
}

// Handler runs payload commands. Its Handle method is a worker.Handler.
type Handler struct {
	cfg  Config
	base []string // what every command's environment starts from
}

// New returns a Handler.
func New(cfg Config) (*Handler, error) {
	if cfg.KillGrace < 0 {
		return nil, fmt.Errorf("exec worker: kill grace %s is negative", cfg.KillGrace)
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.Environ == nil {
		cfg.Environ = os.Environ()
	}
	if !cfg.Allow.any && len(cfg.Allow.patterns) == 0 {
		return nil, errors.New("exec worker: the allowlist is empty")
	}
	for _, k := range cfg.PassEnv {
		if !envKey.MatchString(k) {
			return nil, fmt.Errorf("exec worker: pass-env %q is not a variable name", k)
		}
	}
	if cfg.AllowDir.wd == "" {
		d, err := NewDirAllowlist(nil)
		if err != nil {
			return nil, fmt.Errorf("exec worker: %w", err)
		}
		cfg.AllowDir = d
	}
	if cfg.OutputBurst <= 0 {
		cfg.OutputBurst = DefaultOutputBurst
	}
	if cfg.OutputPerSecond <= 0 {
		cfg.OutputPerSecond = DefaultOutputPerSecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if err := checkUser(cfg.User); err != nil {
		return nil, fmt.Errorf("exec worker: %w", err)
	}
	return &Handler{cfg: cfg, base: environment(cfg.Environ, cfg.PassEnv, cfg.InheritEnv)}, nil
}

var _ worker.Handler = (*Handler)(nil).Handle

// checkUser refuses a user the worker cannot switch to, or one that
// would isolate nothing.
func checkUser(u *syscall.Credential) error {
	if u == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("running commands as user %d needs a worker running as root", u.Uid)
	}
	if u.Uid == 0 {
		return errors.New("commands would run as root, the worker's own user: name another user")
	}
	return nil
}

// Handle runs the attempt's command until it exits or ctx ends.
func (h *Handler) Handle(ctx context.Context, t worker.Task) error {
	log := t.Log
	if log == nil {
		log = slog.Default()
	}
	c, err := h.prepare(t)
	if err != nil {
		return err
	}
	return h.run(ctx, t, c, log)
}

// Fixed returns a handler that runs argv for every attempt, whatever its
// payload: the command a container image fixes (`runledger task run --
// CMD ARGS...`). Each argument is a template, as in a payload; the
// attempt's payload and the run's params reach the process as JSON in
// RUNLEDGER_PAYLOAD and RUNLEDGER_PARAMS, beside the variables every
// command gets. The executable must pass the allowlist as any other.
func (h *Handler) Fixed(argv []string) worker.Handler {
	return func(ctx context.Context, t worker.Task) error {
		log := t.Log
		if log == nil {
			log = slog.Default()
		}
		c, err := h.prepareFrom(t, Payload{Command: argv})
		if err != nil {
			return err
		}
		c.Env = append(c.Env, "RUNLEDGER_PAYLOAD="+string(t.Payload), "RUNLEDGER_PARAMS="+string(t.Params))
		return h.run(ctx, t, c, log)
	}
}

// prepare renders the payload and checks the executable; every error is
// permanent: another attempt would render and check the same.
func (h *Handler) prepare(t worker.Task) (Command, error) {
	p, err := ParsePayload(t.Payload)
	if err != nil {
		return Command{}, worker.Permanent(worker.WithCategory(fmt.Errorf("exec %s: %w", t.Ref(), err), CategoryInvalidPayload))
	}
	return h.prepareFrom(t, p)
}

// prepareFrom checks p's env names, renders p for t, checks its dir and
// the executable.
func (h *Handler) prepareFrom(t worker.Task, p Payload) (Command, error) {
	invalid := func(err error) error {
		return worker.Permanent(worker.WithCategory(fmt.Errorf("exec %s: %w", t.Ref(), err), CategoryInvalidPayload))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		if err := h.cfg.AllowEnv.Check(k); err != nil {
			return Command{}, invalid(err)
		}
	}
	v, err := VarsOf(t)
	if err != nil {
		return Command{}, invalid(err)
	}
	c, err := p.Render(v)
	if err != nil {
		return Command{}, invalid(err)
	}
	if c.Dir, err = h.cfg.AllowDir.Resolve(c.Dir); err != nil {
		return Command{}, invalid(err)
	}
	if err := h.cfg.Allow.Resolve(&c); err != nil {
		category := CategoryNotFound
		if errors.Is(err, ErrNotAllowed) {
			category = CategoryNotAllowed
		}
		return Command{}, worker.Permanent(worker.WithCategory(fmt.Errorf("exec %s: %w", t.Ref(), err), category))
	}
	return c, nil
}

// EnvFence names the variable that carries the attempt's fence to a
// command, as JSON in the claim answer's shape (docs/api.md, "Workers"),
// so that a script puts it into its own TransactWriteItems. It is set
// only when the claim answer carried one (a DynamoDB ledger).
const EnvFence = "RUNLEDGER_FENCE"

// environ is the process's environment: the base (BaseEnv and PassEnv of
// the worker's), the payload's, then the attempt's RUNLEDGER_* variables
// (which nothing may override). The attempt's token is not among them:
// the worker claims, heartbeats and completes, and a sibling process
// could read it from /proc/<pid>/environ. The fence is: it names an item
// and a condition, and grants nothing to whoever reads it.
func (h *Handler) environ(ctx context.Context, t worker.Task, c Command) ([]string, error) {
	logical := ""
	if !t.LogicalTime.IsZero() {
		logical = protocol.FormatTime(t.LogicalTime)
	}
	env := slices.Clone(h.base)
	env = append(env, c.Env...)
	env = append(env,
		"RUNLEDGER_JOB="+t.Job,
		"RUNLEDGER_RUN="+t.Run,
		"RUNLEDGER_TASK="+t.Task,
		"RUNLEDGER_ATTEMPT="+strconv.Itoa(t.Attempt),
		"RUNLEDGER_LOGICAL_TIME="+logical,
	)
	if tp := worker.TraceParent(ctx); tp != "" {
		// Last, so neither the payload's env nor an inherited one
		// overrides the attempt's own span.
		env = append(env, protocol.EnvTraceParent+"="+tp)
	}
	f, err := t.WireFence()
	if errors.Is(err, worker.ErrNoFence) {
		return env, nil
	}
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("fence of %s: %w", t.Ref(), err)
	}
	return append(env, EnvFence+"="+string(b)), nil
}

// run starts the process, streams its output to the log, and waits for it
// or for ctx; then it maps how the process ended to the handler's result.
func (h *Handler) run(ctx context.Context, t worker.Task, c Command, log *slog.Logger) error {
	environ, err := h.environ(ctx, t, c)
	if err != nil {
		return fmt.Errorf("exec %s: %w", t.Ref(), err)
	}
	outFile, err := newOutputFile(h.cfg.User)
	if err != nil {
		return fmt.Errorf("exec %s: %w", t.Ref(), err)
	}
	defer os.Remove(outFile)
	environ = append(environ, EnvOutput+"="+outFile)
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("exec %s: %w", t.Ref(), err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("exec %s: %w", t.Ref(), err)
	}
	// The arguments and env values may hold the run's params: only their
	// count is logged.
	log.InfoContext(ctx, "starting command", "path", c.Path, "args", len(c.Args)-1)
	cmd := &exec.Cmd{
		Path: c.Path, Args: c.Args, Dir: c.Dir, Env: environ,
		Stdout: outW, Stderr: errW,
		// Its own process group, so that a stop reaches its children too.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: h.cfg.User},
	}
	startErr := cmd.Start()
	// The children hold the write ends now; ours would keep the readers
	// from ever seeing EOF.
	outW.Close()
	errW.Close()
	if startErr != nil {
		outR.Close()
		errR.Close()
		return worker.Permanent(worker.WithCategory(fmt.Errorf("exec %s: start %s: %w", t.Ref(), c.Path, startErr), CategoryNotFound))
	}
	pgid := cmd.Process.Pid

	tail := &tailBuffer{max: worker.MaxReasonBytes}
	lines := &lineLimit{burst: float64(h.cfg.OutputBurst), perSecond: h.cfg.OutputPerSecond, now: h.cfg.Now}
	var readers sync.WaitGroup
	readers.Go(func() {
		scanLines(outR, func(line string) {
			if lines.take() {
				log.Info("command output", "stream", "stdout", "line", line)
			}
		})
	})
	readers.Go(func() {
		scanLines(errR, func(line string) {
			tail.writeLine(line)
			if lines.take() {
				log.Info("command output", "stream", "stderr", "line", line)
			}
		})
	})

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var waitErr error
	stopped := false
	select {
	case waitErr = <-waited:
	case <-ctx.Done():
		stopped = true
		waitErr = h.stop(ctx, pgid, waited, log)
	}
	// Whatever the group still holds goes with its leader: the task is over.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	drainOutput(&readers, outR, errR)
	if n := lines.dropped; n > 0 {
		log.WarnContext(ctx, "command output lines dropped", "dropped", n,
			"burst", h.cfg.OutputBurst, "per_second", h.cfg.OutputPerSecond)
	}

	if err := h.result(ctx, t, c, cmd.ProcessState, waitErr, stopped, tail.String()); err != nil {
		return err
	}
	return takeOutput(t, outFile, h.commandUID())
}

// commandUID is the uid commands run as.
func (h *Handler) commandUID() int {
	if h.cfg.User != nil {
		return int(h.cfg.User.Uid)
	}
	return os.Geteuid()
}

// stop sends SIGTERM to the group, SIGKILL after the grace period, and
// returns the process's wait result.
func (h *Handler) stop(ctx context.Context, pgid int, waited <-chan error, log *slog.Logger) error {
	log.InfoContext(ctx, "stopping command", "cause", context.Cause(ctx).Error(), "signal", "SIGTERM", "grace", h.cfg.KillGrace.String())
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(h.cfg.KillGrace)
	defer grace.Stop()
	select {
	case err := <-waited:
		return err
	case <-grace.C:
		log.WarnContext(ctx, "command outlived its grace period", "signal", "SIGKILL")
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-waited
	}
}

// result maps the process's end to what the handler returns.
func (h *Handler) result(ctx context.Context, t worker.Task, c Command, ps *os.ProcessState, waitErr error, stopped bool, stderrTail string) error {
	if stopped {
		// Whatever its exit status, the process ended because the attempt
		// had to stop; the SDK reports that (cancelled, timeout, ...).
		err := fmt.Errorf("exec %s: %s stopped: %w", t.Ref(), c.Args[0], errors.Join(ctx.Err(), context.Cause(ctx)))
		return withStderr(err, stderrTail)
	}
	if ps == nil {
		return fmt.Errorf("exec %s: wait %s: %w", t.Ref(), c.Path, waitErr)
	}
	if ps.Success() {
		return nil
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		err := fmt.Errorf("exec %s: %s killed by %s", t.Ref(), c.Args[0], ws.Signal())
		return withStderr(worker.WithCategory(err, CategoryKilled), stderrTail)
	}
	code := ps.ExitCode()
	err := worker.WithExitCode(worker.WithCategory(fmt.Errorf("exec %s: %s exited with status %d", t.Ref(), c.Args[0], code), CategoryFailed), code)
	if slices.Contains(c.PermanentExitCodes, code) {
		err = worker.Permanent(err)
	}
	return withStderr(err, stderrTail)
}

// drainOutput waits for the output readers, closing the pipes if a process
// that escaped the group keeps them open past outputDrain.
func drainOutput(readers *sync.WaitGroup, pipes ...*os.File) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(outputDrain):
		for _, p := range pipes {
			_ = p.SetReadDeadline(time.Now())
		}
		<-done
	}
	for _, p := range pipes {
		p.Close()
	}
}

// maxLine bounds one logged line; a longer one is logged in pieces.
const maxLine = 16 << 10

// scanLines calls emit with each line of r, without its newline.
func scanLines(r io.Reader, emit func(string)) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			emit(strings.TrimRight(string(line), "\r\n"))
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// lineLimit is a token bucket over the output lines of one attempt: burst
// lines at once, then perSecond a second; the lines refused are counted.
type lineLimit struct {
	mu        sync.Mutex
	burst     float64
	perSecond float64
	now       func() time.Time
	tokens    float64
	last      time.Time
	started   bool
	dropped   int
}

// take says whether one more line may be logged now.
func (l *lineLimit) take() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.started {
		l.started, l.tokens = true, l.burst
	} else if d := now.Sub(l.last); d > 0 {
		l.tokens = min(l.burst, l.tokens+d.Seconds()*l.perSecond)
	}
	l.last = now
	if l.tokens < 1 {
		l.dropped++
		return false
	}
	l.tokens--
	return true
}

// tailBuffer keeps the last max bytes of the lines written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) writeLine(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, line...)
	t.b = append(t.b, '\n')
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
}

// String is the tail as valid UTF-8 (a cut through a character drops it).
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(strings.TrimRight(string(t.b), "\n"), "")
}

// withStderr makes the stderr tail the failure's reason; without output
// the reason stays the error's own sentence.
func withStderr(err error, tail string) error {
	if tail == "" {
		return err
	}
	return worker.WithReason(err, tail)
}
