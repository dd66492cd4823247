//go:build !linux

package emulator

import (
	"errors"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the server in a process group of its own. No kernel but
// Linux's kills a child when its parent dies: the launchers exit when their
// stdin from this process closes instead (watchStdinEnv).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// serve runs the spawner's work until close. Only Linux ties a child's
// life to the thread that forked it; here any thread will do.
func (sp *spawner) serve() {
	for f := range sp.queue {
		f()
	}
}

// ownsPort reports whether the server, rather than another process that
// grabbed the port first, is the one listening on port. Without /proc the
// proof is the launcher's own line, printed once its socket is bound.
func ownsPort(p *process, port int, readyLine string) bool {
	return strings.Contains(p.out.String(), readyLine)
}

// Alive reports whether pid names a process that has not terminated. A
// zombie (terminated, not yet reaped by whoever inherited it) counts as gone.
func Alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	// ps exits non-zero when there is no such process.
	out, err := exec.Command("ps", "-o", "stat=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return false
	}
	state := strings.TrimSpace(string(out))
	return state != "" && state[0] != 'Z'
}

// Listeners answers ErrListenersUnsupported: it reads Linux's /proc.
func Listeners(pid int) ([]netip.AddrPort, error) {
	return nil, ErrListenersUnsupported
}
