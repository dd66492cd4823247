package protocol

import (
	"bytes"
	"encoding/json"
)

// MaxOutputBytes bounds a task's output: the JSON value a completion (or
// a signal) reports, encoded.
const MaxOutputBytes = 16 << 10

// CheckOutput checks an output: at most MaxOutputBytes (TooLarge, 413)
// and one JSON value (malformed, 422). Nil is no output.
func CheckOutput(out json.RawMessage) error {
	if out == nil {
		return nil
	}
	if len(out) > MaxOutputBytes {
		return tooLarge("output", len(out), MaxOutputBytes, "bytes")
	}
	if !json.Valid(out) {
		return malformed("output", "output must be one JSON value.")
	}
	return nil
}

// CompactOutput is the stored form of an output: compacted JSON, so that
// an output counts the same against its limit wherever it is read. Nil
// and JSON null are no output.
func CompactOutput(out json.RawMessage) json.RawMessage {
	if out == nil || string(bytes.TrimSpace(out)) == "null" {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		return out
	}
	return b.Bytes()
}
