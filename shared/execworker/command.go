// Package execworker is a worker handler that runs a command named in the
// task's payload, the handler behind `runledger worker exec`:
//
//	{"command": ["python3", "etl.py", "--day", "{{.LogicalDate}}"],
//	 "env": {"REGION": "eu"}, "dir": "/srv/etl", "permanent_exit_codes": [2]}
//
// Every argument, env value and dir is a Go text/template over Vars (the
// attempt's envelope), each rendered within MaxFieldBytes and all together
// within MaxRenderedBytes. The executable must match the allowlist, and
// the arguments reach it as they are: never through a shell. The payload's env names must pass the worker's
// EnvAllowlist and its dir the DirAllowlist; the process's environment is
// otherwise only BaseEnv and the names the worker passes (Config.PassEnv),
// never the worker's whole environment. A payload refused on any of these
// fails with CategoryInvalidPayload and nothing runs. The process runs
// in its own process group; when the attempt must stop (a cancel request,
// the run timeout, a lost lease, a shutdown) the group gets SIGTERM, then
// SIGKILL after a grace period. Exit 0 is success; any other status is a
// failure carrying the exit code, retryable unless the payload lists it as
// permanent, with the tail of the process's stderr as the reason.
package execworker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/runledger/runledger/shared/fault"
	"github.com/runledger/runledger/shared/fieldtemplate"
	"github.com/runledger/runledger/shared/protocol"
	"github.com/runledger/runledger/shared/worker"
)

// Error categories this handler reports, besides the SDK's own.
const (
	// CategoryNotAllowed: the executable matches no --allow pattern.
	CategoryNotAllowed = "command_not_allowed"
	// CategoryInvalidPayload: the payload is not a command this handler
	// can run (bad shape, a template that does not render or renders too
	// much, an env name or a dir the worker does not admit).
	CategoryInvalidPayload = "invalid_payload"
	// CategoryNotFound: the executable does not exist or cannot start.
	CategoryNotFound = "command_not_found"
	// CategoryFailed: the process exited with a non-zero status.
	CategoryFailed = "command_failed"
	// CategoryKilled: a signal this handler did not send ended the process.
	CategoryKilled = "command_killed"
)

// Payload is the task payload the handler runs.
type Payload struct {
	// Command is the executable and its arguments; each is a template.
	Command []string `json:"command"`
	// Env adds variables to the process's environment (names the
	// worker's EnvAllowlist admits); values are templates.
	Env map[string]string `json:"env,omitempty"`
	// Dir is the working directory (a template, admitted by the worker's
	// DirAllowlist); default: the worker's.
	Dir string `json:"dir,omitempty"`
	// PermanentExitCodes are exit statuses not worth retrying.
	PermanentExitCodes []int `json:"permanent_exit_codes,omitempty"`
}

// Vars are what the templates see.
type Vars struct {
	Job     string
	Run     string
	Task    string
	Attempt int
	// LogicalTime is the run's logical time, RFC 3339 UTC with
	// milliseconds ("" when the envelope has none).
	LogicalTime string
	// LogicalDate is the UTC date of the logical time, YYYY-MM-DD.
	LogicalDate string
	// Params are the run's parameters; a missing key fails the template.
	Params map[string]any
	// Inputs are the outputs of the task's direct upstream tasks, by
	// task (worker.Task.Inputs), decoded.
	Inputs map[string]any
	// Item and Index are a map child's element and position (nil and 0
	// for another task).
	Item  any
	Index int
}

// VarsOf builds the template variables of an attempt.
func VarsOf(t worker.Task) (Vars, error) {
	v := Vars{Job: t.Job, Run: t.Run, Task: t.Task, Attempt: t.Attempt, Params: map[string]any{}}
	if !t.LogicalTime.IsZero() {
		v.LogicalTime = protocol.FormatTime(t.LogicalTime)
		v.LogicalDate = t.LogicalTime.UTC().Format(time.DateOnly)
	}
	if len(t.Params) > 0 && string(t.Params) != "null" {
		dec := json.NewDecoder(bytes.NewReader(t.Params))
		dec.UseNumber() // {{.Params.n}} prints 12345678901234567890 as given
		if err := dec.Decode(&v.Params); err != nil {
			return Vars{}, fmt.Errorf("params are not a JSON object: %w", err)
		}
	}
	if err := addInputVars(&v, t); err != nil {
		return Vars{}, err
	}
	return v, nil
}

// Command is a payload rendered for one attempt, ready to start.
type Command struct {
	// Path is the executable that runs, symlinks resolved: the allowlist
	// checked this path.
	Path string
	// Args is the argument vector, Args[0] as the payload wrote it.
	Args               []string
	Env                []string // KEY=value, the payload's only
	Dir                string
	PermanentExitCodes []int
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParsePayload decodes a task payload strictly: unknown fields are refused,
// so a misspelt "permanent_exit_code" is an error, not a silent default.
func ParsePayload(raw []byte) (Payload, error) {
	var p Payload
	if len(raw) == 0 {
		return p, errors.New(`the task has no payload; want {"command": [...]}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("payload: %w", err)
	}
	if len(p.Command) == 0 || p.Command[0] == "" {
		return p, errors.New("payload: command is empty; want the executable and its arguments")
	}
	for k := range p.Env {
		if !envKey.MatchString(k) {
			return p, fmt.Errorf("payload: env name %q is not a variable name", k)
		}
		if strings.HasPrefix(k, "RUNLEDGER_") {
			return p, fmt.Errorf("payload: env name %q is reserved for the worker", k)
		}
	}
	return p, nil
}

// Render expands every template of p with v, all of them within one
// budget of MaxRenderedBytes.
func (p Payload) Render(v Vars) (Command, error) {
	c := Command{PermanentExitCodes: slices.Clone(p.PermanentExitCodes)}
	b := fieldtemplate.NewBudget(MaxRenderedBytes)
	for i, a := range p.Command {
		s, err := render(b, fmt.Sprintf("command[%d]", i), a, v)
		if err != nil {
			return Command{}, err
		}
		c.Args = append(c.Args, s)
	}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s, err := render(b, "env."+k, p.Env[k], v)
		if err != nil {
			return Command{}, err
		}
		c.Env = append(c.Env, k+"="+s)
	}
	dir, err := render(b, "dir", p.Dir, v)
	if err != nil {
		return Command{}, err
	}
	c.Dir = dir
	if c.Args[0] == "" {
		return Command{}, errors.New("command[0] renders empty")
	}
	return c, nil
}

// Allowlist says which executables may run.
//
// A pattern with a slash is a glob (path.Match syntax) over the absolute
// path of the executable with its symlinks resolved: "/usr/bin/*",
// "/srv/etl/bin/*.sh". The pattern's own directories are resolved when the
// list is made (a pattern without glob characters names one file, whose
// target it admits), so "/bin/*" admits /bin/sh where /bin is a link to
// /usr/bin, but a link in an allowed folder to a file elsewhere is refused. A
// pattern without one is a glob over a bare command name that is looked up
// in the worker's PATH: "python3", "sleep". A bare name never admits a path
// ("./python3" or "/tmp/python3" need a pattern with a slash), so a payload
// cannot run a file of the same name from elsewhere.
type Allowlist struct {
	patterns []string
	any      bool
}

// NewAllowlist checks the patterns. anyCommand admits every executable; it
// must be asked for explicitly (--allow-any).
func NewAllowlist(patterns []string, anyCommand bool) (Allowlist, error) {
	for _, p := range patterns {
		if p == "" {
			return Allowlist{}, errors.New("allow pattern is empty")
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return Allowlist{}, fmt.Errorf("allow pattern %q: %w", p, err)
		}
	}
	if len(patterns) == 0 && !anyCommand {
		return Allowlist{}, errors.New("no allow pattern: name the executables this worker may run (--allow), or --allow-any")
	}
	a := Allowlist{any: anyCommand}
	for _, p := range patterns {
		a.patterns = append(a.patterns, resolvePattern(p))
	}
	return a, nil
}

// resolvePattern resolves the symlinks of an absolute pattern's leading
// directories, those before the first with a glob character; a pattern
// with none is resolved whole. What does not exist stays as written.
func resolvePattern(p string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	p = filepath.Clean(p)
	if !hasMeta(p) {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	parts := strings.Split(p, string(filepath.Separator))
	i := slices.IndexFunc(parts, hasMeta)
	prefix := string(filepath.Separator) + filepath.Join(parts[:i]...)
	r, err := filepath.EvalSymlinks(prefix)
	if err != nil {
		return p
	}
	return filepath.Join(append([]string{r}, parts[i:]...)...)
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// Resolve finds the executable of c (in PATH for a bare name, relative to
// c.Dir for a relative path), checks it against the list and sets c.Path.
// A refusal wraps ErrNotAllowed; a missing executable ErrCommandNotFound.
func (a Allowlist) Resolve(c *Command) error {
	name := c.Args[0]
	bare := !strings.ContainsRune(name, '/')
	var path string
	if bare {
		p, err := exec.LookPath(name)
		if err != nil {
			if a.allowed(name, "", true) {
				return fmt.Errorf("%w: %q is not in PATH", ErrCommandNotFound, name)
			}
			return fmt.Errorf("%w: %q matches no allow pattern", ErrNotAllowed, name)
		}
		path = p
	} else {
		path = name
		if !filepath.IsAbs(path) {
			path = filepath.Join(c.Dir, path)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrCommandNotFound, name, err)
	}
	// The file that runs is the one checked: a link's target, not its name.
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if a.allowed(name, abs, bare) {
			return fmt.Errorf("%w: %q: %v", ErrCommandNotFound, name, err)
		}
		return fmt.Errorf("%w: %q (%s) matches no allow pattern", ErrNotAllowed, name, abs)
	}
	if !a.allowed(name, resolved, bare) {
		return fmt.Errorf("%w: %q (%s) matches no allow pattern", ErrNotAllowed, name, resolved)
	}
	c.Path = resolved
	return nil
}

func (a Allowlist) allowed(name, abs string, bare bool) bool {
	if a.any {
		return true
	}
	for _, p := range a.patterns {
		if strings.ContainsRune(p, '/') {
			if abs != "" {
				if ok, _ := filepath.Match(p, abs); ok {
					return true
				}
			}
			continue
		}
		if bare {
			if ok, _ := filepath.Match(p, name); ok {
				return true
			}
		}
	}
	return false
}

// Errors of Resolve.
var (
	// ErrNotAllowed: the allowlist does not admit the executable.
	ErrNotAllowed = fault.New(fault.Forbidden, "command not allowed")
	// ErrCommandNotFound: the executable is not on PATH or not at its path.
	ErrCommandNotFound = fault.New(fault.NotFound, "command not found")
)
