// Package localinfo is the file `make run` writes, .runledger/local.json: the
// local stack's API URL and key, its emulator endpoints, table and queues,
// so that workers, the CLI and the client outside the stack's process can
// join it. It imports nothing of the server, so a client reads the file
// without linking the stack.
package localinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultPath is where `make run` writes the file, relative to the
// repository root (the working directory of `make run`).
const DefaultPath = ".runledger/local.json"

// Info is what the file holds.
type Info struct {
	APIURL           string            `json:"api_url"`
	APIKey           string            `json:"api_key"`
	DynamoDBEndpoint string            `json:"dynamodb_endpoint"`
	SQSEndpoint      string            `json:"sqs_endpoint"`
	Region           string            `json:"region"`
	Table            string            `json:"table"`
	Queues           map[string]string `json:"queues"`
}

// Write writes info to path, creating its folder. The file holds the API
// key, so only its owner may read it.
func Write(path string, info Info) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Read reads the file at path.
func Read(path string) (Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Info{}, fmt.Errorf("read %s: %w", path, err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("read %s: %w", path, err)
	}
	return info, nil
}

// Find looks for DefaultPath in dir and then in each parent of dir, so a
// tool run anywhere inside the repository finds the stack `make run`
// started at its root. It answers the path found, or fs.ErrNotExist.
func Find(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("find %s: %w", DefaultPath, err)
	}
	for {
		p := filepath.Join(dir, DefaultPath)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("find %s: %w", DefaultPath, err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find %s from %s: %w", DefaultPath, dir, fs.ErrNotExist)
		}
		dir = parent
	}
}
