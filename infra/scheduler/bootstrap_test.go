package scheduler

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBootstrapMustBeStaticAarch64: what Lambda's provided.al2023 runtime
// on arm64 cannot start is refused at synthesis, with a sentence that says
// what is wrong and how to build it; real Go builds for both
// architectures included.
func TestBootstrapMustBeStaticAarch64(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	amd64 := PlaceholderBootstrap()
	binary.LittleEndian.PutUint16(amd64[18:], 62) // e_machine EM_X86_64
	dynamic := PlaceholderBootstrap()
	binary.LittleEndian.PutUint32(dynamic[64:], 3) // the one program header: PT_INTERP
	build := func(goarch string) string {
		src := filepath.Join(dir, "main.go")
		if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "go-"+goarch)
		cmd := exec.Command("go", "build", "-o", out, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", goarch, err, b)
		}
		return out
	}
	for _, tc := range []struct {
		name, path string
		want       string // substring of the error; "" means accepted
	}{
		{"placeholder", write("placeholder", PlaceholderBootstrap()), ""},
		{"go linux/arm64", build("arm64"), ""},
		{"go linux/amd64", build("amd64"), "is built for EM_X86_64"},
		{"amd64 header", write("amd64", amd64), "want linux/arm64 (EM_AARCH64)"},
		{"dynamic", write("dynamic", dynamic), "is dynamically linked"},
		{"script", write("script", []byte("#!/bin/sh\necho hi\n")), "is not an ELF executable"},
	} {
		err := checkBootstrap(tc.path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "make functions")):
			t.Errorf("%s: error %v, want one saying %q and naming make functions", tc.name, err, tc.want)
		}
	}
	// Validation names the function whose executable is refused.
	code := codeDir(t, FunctionAPI, FunctionEvents, FunctionTicker, FunctionReconciler)
	if err := os.WriteFile(filepath.Join(code, FunctionTicker, "bootstrap"), amd64, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := (Props{CodeDir: code}).Validate(); err == nil || !strings.Contains(err.Error(), "function ticker: ") {
		t.Errorf("validate with an amd64 ticker: %v", err)
	}
}
