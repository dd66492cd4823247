package emulator

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the server in a process group of its own and has the
// kernel SIGKILL it when this process dies, however it dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// serve runs the spawner's work on one goroutine locked to its thread
// until close. Pdeathsig fires when the *thread* that forked the child
// exits, not the process, and Go may retire a thread (a goroutine that
// exits while locked to it): so every server of an Env is forked from this
// one thread, which lives until the Env has stopped them all.
func (sp *spawner) serve() {
	runtime.LockOSThread() // never unlocked: the thread must outlive every child
	for f := range sp.queue {
		f()
	}
}

// ownsPort reports whether the server itself holds a listening TCP socket
// on port. A health check alone could be answered by another server that
// grabbed the port first; the socket's inode proves the listener is ours.
// (readyLine serves platforms without /proc.)
func ownsPort(p *process, port int, readyLine string) bool {
	return listening(p.pid(), port)
}

// Alive reports whether pid names a process that has not terminated. A
// zombie (terminated, not yet reaped by whoever inherited it) counts as gone.
func Alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state field follows the command name, which is in parentheses and
	// may itself contain spaces or parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	switch s[i+2] {
	case 'Z', 'X', 'x':
		return false
	}
	return true
}

// listening reports whether process pid itself holds a listening TCP socket
// on port.
func listening(pid, port int) bool {
	addrs, err := Listeners(pid)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if int(a.Port()) == port {
			return true
		}
	}
	return false
}

// Listeners lists the local addresses of the listening TCP sockets that
// process pid holds open, IPv4 and IPv6 (IPv4-mapped addresses unmapped),
// so a test can check that nothing listens beyond the loopback address.
func Listeners(pid int) ([]netip.AddrPort, error) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("listeners of pid %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var addrs []netip.AddrPort
	if len(inodes) == 0 {
		return addrs, nil
	}
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6 in this kernel
		}
		if err != nil {
			return nil, fmt.Errorf("listeners of pid %d: %w", pid, err)
		}
		found, err := scanListeners(f, inodes)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("listeners of pid %d: %s: %w", pid, table, err)
		}
		addrs = append(addrs, found...)
	}
	return addrs, nil
}

// scanListeners reads a /proc/net/tcp or tcp6 table and returns the local
// addresses of the listening sockets (st 0A) whose inode is in inodes.
// Columns: sl, local_address (hex ip:port), rem_address, st, ..., inode
// (the tenth).
func scanListeners(r io.Reader, inodes map[string]bool) ([]netip.AddrPort, error) {
	var addrs []netip.AddrPort
	sc := bufio.NewScanner(r)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
			continue
		}
		a, err := parseProcAddr(fields[1])
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, sc.Err()
}

// parseProcAddr decodes a /proc/net/tcp address: the IP in hex as the
// kernel stores it (each 32-bit word in host byte order), a colon, the
// port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: port: %w", s, err)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: not an IPv4 or IPv6 address in hex", s)
	}
	for w := 0; w < len(raw); w += 4 {
		binary.BigEndian.PutUint32(raw[w:], binary.NativeEndian.Uint32(raw[w:]))
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}
