// Package wire is runledger's one JSON encoding of what it stores or
// queues: job definitions, run params, dispatch envelopes, completions and
// lease messages.
//
// encoding/json's Marshal escapes <, > and & as \u003c, \u003e and \u0026
// for safe embedding in HTML. None of these documents is HTML, and the
// escapes cost six bytes for one: a payload of "<" inside its 64 KiB limit
// would grow past the definition's 256 KiB and SQS's 256 KiB. Marshal
// writes them as they are, so a document's stored size is its compact size.
package wire

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v as compact JSON without HTML escaping. Types with their
// own MarshalJSON must build their output with Marshal too: an outer
// encoder never undoes an inner one's escapes.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
