package api

import (
	"net/http"
	"regexp"
	"strings"
)

var pathParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// OpenAPI returns the OpenAPI 3 document of every route the handler serves,
// generated from the same route list that registers them.
func (h *Handler) OpenAPI() map[string]any {
	paths := map[string]any{}
	for _, rt := range h.routes() {
		item, _ := paths[rt.Pattern].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[rt.Pattern] = item
		}
		op := map[string]any{
			"summary":     rt.Summary,
			"operationId": strings.ToLower(rt.Method) + strings.NewReplacer("/", "_", "{", "", "}", "", "-", "_", ".", "_").Replace(rt.Pattern),
			"responses": map[string]any{
				"default": map[string]any{"description": "An error: {\"code\", \"message\"}.",
					"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}},
				"2XX": map[string]any{"description": "Success.", "content": map[string]any{"application/json": map[string]any{}}},
			},
		}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.Pattern, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		switch rt.Auth {
		case authNone:
			op["security"] = []any{}
		case authAttempt:
			op["security"] = []any{map[string]any{"attemptToken": []any{}}}
		default:
			op["security"] = []any{map[string]any{"apiKey": []any{}}, map[string]any{"sigv4": []any{}}}
		}
		item[strings.ToLower(rt.Method)] = op
	}
	return map[string]any{
		"openapi": "3.0.3",
		"info":    map[string]any{"title": "runledger", "version": "1"},
		"paths":   paths,
		"components": map[string]any{
			"schemas": map[string]any{"Error": map[string]any{
				"type": "object", "required": []string{"code", "message"},
				"properties": map[string]any{"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}},
			}},
			"securitySchemes": map[string]any{
				"apiKey":       map[string]any{"type": "http", "scheme": "bearer", "description": "Local stack: the API key."},
				"attemptToken": map[string]any{"type": "http", "scheme": "bearer", "description": "The attempt token from the envelope."},
				"sigv4":        map[string]any{"type": "apiKey", "in": "header", "name": "Authorization", "description": "AWS: IAM (SigV4)."},
			},
		},
	}
}

func (h *Handler) openapi(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, h.OpenAPI())
	return nil
}
