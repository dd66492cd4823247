package execworker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/runledger/runledger/shared/worker"
)

// EnvOutput names the file a command writes its output to: a JSON value
// of at most worker.MaxOutputBytes, which the successful completion
// reports as the attempt's output. The worker creates the file empty for
// each attempt and removes it after; left empty, the attempt has no
// output.
const EnvOutput = "RUNLEDGER_OUTPUT"

// Categories of an output the worker cannot report.
const (
	// CategoryOutputTooLarge: the output file holds more than
	// worker.MaxOutputBytes.
	CategoryOutputTooLarge = "output_too_large"
	// CategoryInvalidOutput: the output file holds something other than
	// one JSON value.
	CategoryInvalidOutput = "invalid_output"
)

// newOutputFile creates an attempt's empty output file, readable and
// writable by the command's user only (owner, when set, else the
// worker's), and answers its path.
func newOutputFile(owner *syscall.Credential) (string, error) {
	f, err := os.CreateTemp("", "runledger-output-*.json")
	if err != nil {
		return "", fmt.Errorf("create output file: %w", err)
	}
	name := f.Name()
	if owner != nil {
		err = f.Chown(int(owner.Uid), int(owner.Gid))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		return "", fmt.Errorf("create output file: %w", err)
	}
	return name, nil
}

// takeOutput reads a succeeded command's output file, reading no more
// than one byte past the limit, and sets it as t's output. uid is the
// command's user, who must own the file.
func takeOutput(t worker.Task, path string, uid int) error {
	f, err := openOutput(path, uid)
	if errors.Is(err, os.ErrNotExist) {
		return nil // the command removed it: no output
	}
	if errors.Is(err, errOutputNotOwn) {
		return worker.WithCategory(fmt.Errorf("exec %s: %w", t.Ref(), err), CategoryInvalidOutput)
	}
	if err != nil {
		return fmt.Errorf("exec %s: read output: %w", t.Ref(), err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, worker.MaxOutputBytes+1))
	if err != nil {
		return fmt.Errorf("exec %s: read output: %w", t.Ref(), err)
	}
	if len(b) > worker.MaxOutputBytes {
		return worker.WithCategory(fmt.Errorf("exec %s: the output file holds more than %d bytes", t.Ref(), worker.MaxOutputBytes), CategoryOutputTooLarge)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if !json.Valid(b) {
		return worker.WithCategory(fmt.Errorf("exec %s: the output file does not hold one JSON value", t.Ref()), CategoryInvalidOutput)
	}
	if err := t.SetOutput(json.RawMessage(b)); err != nil {
		return worker.WithCategory(fmt.Errorf("exec %s: %w", t.Ref(), err), CategoryOutputTooLarge)
	}
	return nil
}

// errOutputNotOwn: the command left something other than a file of its
// own at its output path.
var errOutputNotOwn = errors.New("the output file is a link, not a regular file, or not the command's user's")

// openOutput opens the output file at path, which the command may have
// replaced, without following a link, and answers errOutputNotOwn for
// anything but a regular file its user owns: a worker running as root
// must not read, and report as output, a file the command could not read
// itself.
func openOutput(path string, uid int) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO put in its place must not wait.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errOutputNotOwn
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || !st.Mode().IsRegular() || int(sys.Uid) != uid {
		f.Close()
		return nil, errOutputNotOwn
	}
	return f, nil
}

// addInputVars decodes t's inputs, item and index into the template
// variables (numbers as written).
func addInputVars(v *Vars, t worker.Task) error {
	v.Inputs = map[string]any{}
	for name, raw := range t.Inputs() {
		var x any
		if err := decodeNumbers(raw, &x); err != nil {
			return fmt.Errorf("input %s is not JSON: %w", name, err)
		}
		v.Inputs[name] = x
	}
	if item := t.Item(); item != nil {
		if err := decodeNumbers(item, &v.Item); err != nil {
			return fmt.Errorf("item is not JSON: %w", err)
		}
	}
	v.Index, _ = t.Index()
	return nil
}

func decodeNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}
