package ecsexec

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStopGrace is how long a local task has between SIGTERM and
// SIGKILL when it is stopped (ECS's default container stop timeout).
const DefaultStopGrace = 30 * time.Second

// Processes is Tasks for the local stack: each task runs as a local
// process (in its own process group) of the command registered for its
// task definition, with the container's environment added to Environ.
// DescribeTask answers from the process's real state: RUNNING while it
// runs, STOPPED with its exit status once it has exited (128 + the
// signal's number when a signal ended it, as ECS reports a killed
// container). A task the stack never started (or started before a
// restart) is MISSING, as one ECS has forgotten.
type Processes struct {
	// Definitions maps a task definition (its family, "etl" of
	// "etl:3" or of an ARN) to the command that stands for its
	// container: the executable and its arguments.
	Definitions map[string][]string
	// Environ is every process's base environment (default os.Environ()).
	Environ []string
	// StopGrace is the time between SIGTERM and SIGKILL on StopTask
	// (default DefaultStopGrace).
	StopGrace time.Duration
	// Logger receives the processes' output lines (default: discarded).
	Logger *slog.Logger

	mu    sync.Mutex
	tasks map[string]*localTask
}

type localTask struct {
	arn, cluster, container string
	pid                     int
	done                    chan struct{}
	// Set once done is closed.
	exitCode int
	stopped  string // the stop reason, when StopTask ended it
}

var _ Tasks = (*Processes)(nil)

// Family is a task definition's family: "etl" of "etl", "etl:3" and
// "arn:aws:ecs:<region>:<account>:task-definition/etl:3".
func Family(taskDefinition string) string {
	td := taskDefinition
	if i := strings.LastIndex(td, "task-definition/"); i >= 0 {
		td = td[i+len("task-definition/"):]
	}
	family, _, _ := strings.Cut(td, ":")
	return family
}

// RunTask starts the process of in's task definition.
func (p *Processes) RunTask(_ context.Context, in RunInput) (string, error) {
	argv, ok := p.Definitions[Family(in.TaskDefinition)]
	if !ok || len(argv) == 0 {
		return "", fmt.Errorf("local ecs run task %s: %w: no command is registered for task definition %q", in.TaskDefinition, ErrRefused, Family(in.TaskDefinition))
	}
	var id [16]byte
	_, _ = rand.Read(id[:])
	arn := fmt.Sprintf("arn:aws:ecs:local:000000000000:task/%s/%s", in.Cluster, hex.EncodeToString(id[:]))
	env := p.Environ
	if env == nil {
		env = os.Environ()
	}
	env = append([]string(nil), env...)
	for _, v := range in.Env {
		env = append(env, v.Name+"="+v.Value)
	}
	out, w, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("local ecs run task %s: %w", in.TaskDefinition, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		return "", fmt.Errorf("local ecs run task %s: start %s: %w", in.TaskDefinition, argv[0], err)
	}
	t := &localTask{arn: arn, cluster: in.Cluster, container: in.Container, pid: cmd.Process.Pid, done: make(chan struct{})}
	p.mu.Lock()
	if p.tasks == nil {
		p.tasks = map[string]*localTask{}
	}
	p.tasks[arn] = t
	p.mu.Unlock()
	log := p.logger().With("task_arn", arn, "task_definition", in.TaskDefinition)
	go logLines(out, log)
	go func() {
		_ = cmd.Wait()
		code := cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		// The container is gone; so is whatever it left in its group.
		_ = syscall.Kill(-t.pid, syscall.SIGKILL)
		p.mu.Lock()
		t.exitCode = code
		p.mu.Unlock()
		close(t.done)
		log.Info("local ecs task stopped", "exit_code", code)
	}()
	return arn, nil
}

// DescribeTask describes a task from its process.
func (p *Processes) DescribeTask(_ context.Context, _ string, arn string) (Task, error) {
	t := p.task(arn)
	if t == nil {
		return Task{ARN: arn, Missing: true}, nil
	}
	select {
	case <-t.done:
	default:
		return Task{ARN: arn, LastStatus: StatusRunning, Containers: []Container{{Name: t.container}}}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	code := t.exitCode
	out := Task{ARN: arn, LastStatus: StatusStopped, StopCode: "EssentialContainerExited", StoppedReason: "Essential container in task exited",
		Containers: []Container{{Name: t.container, ExitCode: &code}}}
	if t.stopped != "" {
		out.StopCode, out.StoppedReason = "UserInitiated", t.stopped
	}
	return out, nil
}

// StopTask sends SIGTERM to the task's process group, and SIGKILL after
// StopGrace if it is still there. It returns at once, as ECS does.
func (p *Processes) StopTask(_ context.Context, _ string, arn, reason string) error {
	t := p.task(arn)
	if t == nil {
		return fmt.Errorf("local ecs stop task %s: the task is unknown", arn)
	}
	p.mu.Lock()
	if t.stopped == "" {
		t.stopped = reason
	}
	p.mu.Unlock()
	_ = syscall.Kill(-t.pid, syscall.SIGTERM)
	grace := p.StopGrace
	if grace <= 0 {
		grace = DefaultStopGrace
	}
	go func() {
		select {
		case <-t.done:
		case <-time.After(grace):
			_ = syscall.Kill(-t.pid, syscall.SIGKILL)
		}
	}()
	return nil
}

// Signal sends sig to a running task's process group (the end-to-end
// tests kill or freeze a task's process with it).
func (p *Processes) Signal(arn string, sig syscall.Signal) error {
	t := p.task(arn)
	if t == nil {
		return fmt.Errorf("local ecs task %s is unknown", arn)
	}
	return syscall.Kill(-t.pid, sig)
}

// Forget drops a task from the view, as ECS forgets a stopped task: it is
// MISSING from then on.
func (p *Processes) Forget(arn string) {
	p.mu.Lock()
	delete(p.tasks, arn)
	p.mu.Unlock()
}

// Wait blocks until the task's process has exited or ctx ends.
func (p *Processes) Wait(ctx context.Context, arn string) error {
	t := p.task(arn)
	if t == nil {
		return fmt.Errorf("local ecs task %s is unknown", arn)
	}
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run keeps the tasks until ctx ends, then kills every process still
// running and waits for them: the local stack leaves none behind.
func (p *Processes) Run(ctx context.Context) error {
	<-ctx.Done()
	p.mu.Lock()
	var live []*localTask
	for _, t := range p.tasks {
		live = append(live, t)
	}
	p.mu.Unlock()
	for _, t := range live {
		select {
		case <-t.done:
		default:
			_ = syscall.Kill(-t.pid, syscall.SIGKILL)
		}
	}
	for _, t := range live {
		<-t.done
	}
	return nil
}

func (p *Processes) task(arn string) *localTask {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tasks[arn]
}

func (p *Processes) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return p.Logger
}

// logLines logs each line of r until it closes.
func logLines(r io.ReadCloser, log *slog.Logger) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		log.Info("local ecs task output", "line", sc.Text())
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		log.Warn("local ecs task output", "error", err.Error())
		_, _ = io.Copy(io.Discard, r) // never block the process on a full pipe
	}
}
