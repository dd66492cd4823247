package emulator

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// dynamoLauncherSource starts DynamoDB Local on 127.0.0.1 only: its own
// main binds every interface.
//
//go:embed DynamoDBLocalLoopback.java
var dynamoLauncherSource []byte

const dynamoLauncherClass = "DynamoDBLocalLoopback"

// dynamoLauncher returns the folder holding the compiled launcher, compiling
// it on first use. The folder's name carries a hash of the source, so an
// edited launcher is compiled again; concurrent first uses each compile into
// a folder of their own and the first rename wins. Compiling once instead of
// running the source file directly (java Launcher.java) saves the compile
// on every start of DynamoDB Local.
func (l layout) dynamoLauncher(ctx context.Context, java string) (string, error) {
	// --release 17: the class runs on any runtime DynamoDB Local supports,
	// whichever JDK compiled it first.
	flags := []string{"--release", "17", "-implicit:none", "-nowarn"}
	sum := sha256.Sum256(append(append([]byte{}, dynamoLauncherSource...), strings.Join(flags, " ")...))
	dir := filepath.Join(l.launcherDir, "dynamodb-loopback-"+hex.EncodeToString(sum[:8]))
	class := filepath.Join(dir, dynamoLauncherClass+".class")
	if _, err := os.Stat(class); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(l.launcherDir, 0o755); err != nil {
		return "", fmt.Errorf("compile the DynamoDB Local launcher: %w", err)
	}
	tmp, err := os.MkdirTemp(l.launcherDir, "compile-")
	if err != nil {
		return "", fmt.Errorf("compile the DynamoDB Local launcher: %w", err)
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, dynamoLauncherClass+".java")
	if err := os.WriteFile(src, dynamoLauncherSource, 0o644); err != nil {
		return "", fmt.Errorf("compile the DynamoDB Local launcher: %w", err)
	}
	// The compiler module of the same runtime, so no separate javac is
	// needed on PATH (running a source file needs that module as well).
	args := append([]string{"-m", "jdk.compiler/com.sun.tools.javac.Main", "-d", tmp}, flags...)
	cmd := exec.CommandContext(ctx, java, append(args, src)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compile the DynamoDB Local launcher with %s (a JDK 17 or newer is needed): %w\n%s",
			java, err, lastLines(string(out), 20))
	}
	if err := os.Remove(src); err != nil {
		return "", fmt.Errorf("compile the DynamoDB Local launcher: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another process compiled the same source first.
		if _, statErr := os.Stat(class); statErr == nil {
			return dir, nil
		}
		return "", fmt.Errorf("compile the DynamoDB Local launcher: %w", err)
	}
	return dir, nil
}
