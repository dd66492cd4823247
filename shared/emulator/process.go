package emulator

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is one emulator server in its own process group, killed with the
// group on Stop. If this process dies first, whether by panic, os.Exit or
// SIGKILL, the server dies too: on Linux the kernel kills it (Pdeathsig,
// process_linux.go), and on every platform its stdin is a pipe from this
// process that the kernel closes, which the launchers watch (watchStdinEnv).
type process struct {
	name    string
	cmd     *exec.Cmd
	out     *tail
	exited  chan struct{} // closed once Wait has returned
	waitErr error

	// parentPipe is the write end of the server's stdin. Nothing is ever
	// written to it; it is closed once the server is reaped.
	parentPipe *os.File
	spawner    *spawner

	stopOnce sync.Once
	stopErr  error
}

// watchStdinEnv tells a launcher (DynamoDBLocalLoopback.java, fauxqs.mjs)
// to exit when its stdin reaches end of file: the parent that holds the
// pipe's other end has died. This is the parent-death signal wherever the
// kernel offers none (everywhere but Linux), and a second one on Linux.
const watchStdinEnv = "RUNLEDGER_WATCH_STDIN"

// spawner starts an Env's servers and keeps each open parentPipe reachable
// until its server is reaped: the garbage collector closes an unreachable
// *os.File, which would make a server exit while the Env that started it,
// merely forgotten, has not been stopped. The spawner's own goroutine (the
// thread it forks from, process_linux.go) holds it, so it stays reachable
// until close.
type spawner struct {
	queue chan func()

	mu    sync.Mutex
	pipes map[*os.File]struct{}
}

// newSpawner starts the goroutine that forks every server of one Env.
func newSpawner() *spawner {
	sp := &spawner{queue: make(chan func()), pipes: map[*os.File]struct{}{}}
	go sp.serve()
	return sp
}

// do runs f on the spawner's goroutine and waits for it.
func (sp *spawner) do(f func()) {
	done := make(chan struct{})
	sp.queue <- func() { defer close(done); f() }
	<-done
}

// close ends the spawner's goroutine once its servers are reaped.
func (sp *spawner) close() { close(sp.queue) }

func (sp *spawner) hold(f *os.File) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.pipes[f] = struct{}{}
}

// release reports whether f was held, and forgets it.
func (sp *spawner) release(f *os.File) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	_, held := sp.pipes[f]
	delete(sp.pipes, f)
	return held
}

func (sp *spawner) spawn(name, dir, bin string, args, env []string) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	out := newTail(32 << 10)
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = 5 * time.Second
	// os.Pipe opens both ends close-on-exec: only this server inherits the
	// read end, and only this process holds the write end.
	stdin, parentPipe, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd.Stdin = stdin
	sp.do(func() { err = cmd.Start() })
	stdin.Close()
	if err != nil {
		parentPipe.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	sp.hold(parentPipe)
	p := &process{name: name, cmd: cmd, out: out, exited: make(chan struct{}), parentPipe: parentPipe, spawner: sp}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// ErrListenersUnsupported is what Listeners answers where it cannot list
// a process's sockets: it reads Linux's /proc.
var ErrListenersUnsupported = errors.New("listing a process's listening sockets needs Linux's /proc")

// closeParentPipe closes the server's stdin from this end, as the kernel
// does when this process dies.
func (p *process) closeParentPipe() {
	if p.spawner.release(p.parentPipe) {
		p.parentPipe.Close()
	}
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// stop kills the whole process group and waits until the server is reaped.
// The emulators keep state in memory only, so there is nothing to flush and
// no reason for a gentler signal.
func (p *process) stop() error {
	p.stopOnce.Do(func() {
		pgid := p.pid() // Setpgid: the group id is the leader's pid
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.stopErr = fmt.Errorf("stop %s (pid %d): kill group: %w", p.name, pgid, err)
			return
		}
		select {
		case <-p.exited:
			p.closeParentPipe()
		case <-time.After(15 * time.Second):
			p.stopErr = fmt.Errorf("stop %s (pid %d): not reaped 15s after SIGKILL", p.name, pgid)
		}
	})
	return p.stopErr
}

// freePort asks the kernel for a port that is free right now. Another
// process may take it before the server binds; start retries on that.
// A variable so a test can hand out a taken port.
var freePort = func() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail keeps the last max bytes a server wrote, for error messages.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
