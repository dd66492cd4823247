package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

// openapiYAML is the API's OpenAPI 3 document, the one description of its
// routes, bodies and error codes.
//
//go:embed openapi.yaml
var openapiYAML []byte

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// OpenAPIYAML is the document as kept in the repository
// (shared/api/openapi.yaml).
func OpenAPIYAML() []byte { return openapiYAML }

// LoadOpenAPI parses the document, its references resolved. Each call
// answers a fresh copy, which the caller may change.
func LoadOpenAPI() (*openapi3.T, error) {
	doc, err := openapi3.NewLoader().LoadFromData(openapiYAML)
	if err != nil {
		return nil, fmt.Errorf("load the OpenAPI document: %w", err)
	}
	return doc, nil
}

// openapiJSON is the document as the handler serves it, converted once.
var openapiJSON = sync.OnceValues(func() ([]byte, error) {
	doc, err := LoadOpenAPI()
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %w", err)
	}
	return json.Marshal(doc)
})

// OpenAPI returns the OpenAPI 3 document the handler serves at
// /v1/openapi.json, as JSON.
func OpenAPI() ([]byte, error) { return openapiJSON() }

func (h *Handler) openapi(w http.ResponseWriter, r *http.Request) error {
	b, err := OpenAPI()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}
