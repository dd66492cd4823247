package emulator

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ModulePath identifies the repository root: the directory whose go.mod
// declares this module (infra/ has a go.mod of its own and is skipped).
const ModulePath = "github.com/runledger/runledger"

// npmPackages are the pinned npm packages the emulators run from, besides
// the platform's Node build (nodePackage). Their installed versions must
// equal the versions in package-lock.json.
var npmPackages = []string{"amplify-dynamodb-simulator", "fauxqs"}

// layout names the files the emulators need inside one repository checkout.
type layout struct {
	root        string
	nodeModules string
	goos        string
	goarch      string
	nodePackage string // the pinned Node build for goos/goarch; "" where npm serves none
	node        string // its node binary ("" without nodePackage: the system's, see nodeBinary)
	fauxqs      string // our launcher script, resolves "fauxqs" from node_modules
	dynamoDir   string // DynamoDB Local's folder: the jar and its native libraries
	dynamoJar   string
	dynamoLib   string
	launcherDir string // compiled launchers (DynamoDBLocalLoopback), ignored by git
	installLock string
}

func newLayout(root string) layout {
	return newLayoutFor(root, runtime.GOOS, runtime.GOARCH)
}

// newLayoutFor is newLayout for the platform goos/goarch.
func newLayoutFor(root, goos, goarch string) layout {
	nm := filepath.Join(root, "node_modules")
	ddb := filepath.Join(nm, "amplify-dynamodb-simulator", "emulator")
	pkg := nodePackage(goos, goarch)
	node := ""
	if pkg != "" {
		node = filepath.Join(nm, pkg, "bin", "node")
	}
	return layout{
		root:        root,
		nodeModules: nm,
		goos:        goos,
		goarch:      goarch,
		nodePackage: pkg,
		node:        node,
		fauxqs:      filepath.Join(root, "shared", "emulator", "fauxqs.mjs"),
		dynamoDir:   ddb,
		dynamoJar:   filepath.Join(ddb, "DynamoDBLocal.jar"),
		dynamoLib:   filepath.Join(ddb, "DynamoDBLocal_lib"),
		launcherDir: filepath.Join(root, ".runledger", "emulator"),
		installLock: filepath.Join(root, ".runledger", "npm-ci.lock"),
	}
}

// FindRoot walks up from dir to the runledger repository root.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find repository root from %s: %w", dir, err)
	}
	for start := dir; ; {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && moduleOf(data) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repository root from %s: no go.mod declaring module %s", start, ModulePath)
		}
		dir = parent
	}
}

// moduleOf returns the module path declared in a go.mod file.
func moduleOf(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			rest, _, _ = strings.Cut(rest, "//")
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// checkInstalled reports why node_modules cannot run the emulators, or nil.
// Versions are compared with package-lock.json so a changed pin reinstalls.
func (l layout) checkInstalled() error {
	data, err := os.ReadFile(filepath.Join(l.root, "package-lock.json"))
	if err != nil {
		return fmt.Errorf("read package-lock.json: %w", err)
	}
	var lock struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(data, &lock); err != nil {
		return fmt.Errorf("parse package-lock.json: %w", err)
	}
	for _, pkg := range l.npmPackages() {
		want := lock.Packages["node_modules/"+pkg].Version
		if want == "" {
			return fmt.Errorf("package-lock.json pins no version of %s", pkg)
		}
		got, err := installedVersion(filepath.Join(l.nodeModules, pkg, "package.json"))
		if err != nil {
			return fmt.Errorf("%s: %w", pkg, err)
		}
		if got != want {
			return fmt.Errorf("%s %s installed, package-lock.json pins %s", pkg, got, want)
		}
	}
	files := []string{l.dynamoJar, l.dynamoLib, filepath.Join(l.nodeModules, "fauxqs", "dist", "app.js")}
	if l.node != "" {
		files = append(files, l.node)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	return nil
}

// npmPackages lists the pinned packages the emulators need on this
// layout's platform.
func (l layout) npmPackages() []string {
	pkgs := slices.Clone(npmPackages)
	if l.nodePackage != "" {
		pkgs = append(pkgs, l.nodePackage)
	}
	return pkgs
}

// nodeBinary is the Node that runs fauxqs: the pinned build, or the
// system's where npm serves none for the platform.
func (l layout) nodeBinary(ctx context.Context) (string, error) {
	if l.node != "" {
		return l.node, nil
	}
	return systemNode(ctx, l.goos, l.goarch)
}

func installedVersion(packageJSON string) (string, error) {
	data, err := os.ReadFile(packageJSON)
	if err != nil {
		return "", err
	}
	var p struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return "", fmt.Errorf("parse %s: %w", packageJSON, err)
	}
	return p.Version, nil
}

// ensureInstalled runs `npm ci` when node_modules does not hold the pinned
// packages the emulators need.
func (l layout) ensureInstalled(ctx context.Context, log *slog.Logger) error {
	return l.install(ctx, log, l.checkInstalled)
}

// InstallTools is the Makefile's deps target (cmd/rldeps): it runs `npm ci`
// in the checkout at root unless node_modules/.installed records the
// package.json and package-lock.json of today and the emulators' packages
// are installed, under the lock the Go tests take. It then touches the
// marker, which make compares by time: a checkout or rebase that changed
// the files' times but not their content costs no reinstall.
func InstallTools(ctx context.Context, root string, log *slog.Logger) error {
	l := newLayout(root)
	err := l.install(ctx, log, func() error {
		if err := l.markerFresh(); err != nil {
			return err
		}
		return l.checkInstalled()
	})
	if err != nil {
		return err
	}
	now := time.Now()
	return os.Chtimes(l.marker(), now, now)
}

// markerFresh reports why node_modules/.installed does not prove that
// `npm ci` installed today's package.json and package-lock.json.
func (l layout) markerFresh() error {
	got, err := os.ReadFile(l.marker())
	if err != nil {
		return err
	}
	want, err := l.stamp()
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(got)) != want {
		return errors.New("package.json or package-lock.json changed since the last npm ci")
	}
	return nil
}

// stamp is what the marker holds after an install: the SHA-256 of
// package.json followed by package-lock.json, in hex (as
// `cat package.json package-lock.json | sha256sum` prints it).
func (l layout) stamp() (string, error) {
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		data, err := os.ReadFile(filepath.Join(l.root, f))
		if err != nil {
			return "", err
		}
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// marker is the file that says "npm ci completed" (the Makefile's target).
func (l layout) marker() string { return filepath.Join(l.nodeModules, ".installed") }

// install runs `npm ci` when needed reports a reason. `go test ./...` runs
// several test binaries at once and make may run beside them, so the
// install is serialized with an flock, and needed is asked again once the
// lock is held: whoever waited finds the work done.
func (l layout) install(ctx context.Context, log *slog.Logger, needed func() error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if needed() == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(l.installLock), 0o755); err != nil {
		return fmt.Errorf("install npm packages: %w", err)
	}
	f, err := os.OpenFile(l.installLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("install npm packages: %w", err)
	}
	defer f.Close()
	if err := flock(ctx, f); err != nil {
		return fmt.Errorf("install npm packages: lock %s: %w", l.installLock, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)

	reason := needed()
	if reason == nil {
		return nil
	}
	log.InfoContext(ctx, "installing npm packages", "dir", l.root, "reason", reason.Error())
	started := time.Now()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = l.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("install npm packages: npm ci in %s: %w\n%s", l.root, err, lastLines(string(out), 40))
	}
	if err := l.checkInstalled(); err != nil {
		return fmt.Errorf("install npm packages: still incomplete after npm ci: %w", err)
	}
	stamp, err := l.stamp()
	if err != nil {
		return fmt.Errorf("install npm packages: %w", err)
	}
	if err := os.WriteFile(l.marker(), []byte(stamp+"\n"), 0o644); err != nil {
		return fmt.Errorf("install npm packages: %w", err)
	}
	log.InfoContext(ctx, "installed npm packages", "duration_ms", time.Since(started).Milliseconds())
	return nil
}

// flock takes an exclusive lock, giving up when ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
