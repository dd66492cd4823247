// Package repo checks the repository itself: it holds sources, not build
// output.
package repo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes is the largest file the repository may track. Binaries,
// archives and emulator data are built or installed, never committed.
const maxTrackedBytes = 1 << 20

// TestNoTrackedFileOverOneMiB fails when git tracks a file larger than
// 1 MiB, such as a binary built at the root by `go build ./cmd/runledger`.
func TestNoTrackedFileOverOneMiB(t *testing.T) {
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (git ls-files: %v)", err)
	}
	names := bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0})
	if len(names) < 10 {
		t.Fatalf("git ls-files listed %d files; the repository holds far more", len(names))
	}
	for _, n := range names {
		name := string(n)
		fi, err := os.Lstat(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Mode().IsRegular() && fi.Size() > maxTrackedBytes {
			t.Errorf("%s is tracked and %d bytes, over %d: build output belongs in .gitignore", name, fi.Size(), maxTrackedBytes)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	return strings.TrimSpace(string(out))
}
