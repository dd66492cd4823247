// Package dashboard is runledger's web dashboard: a page and its static
// assets (plain JavaScript, no build step), embedded in the binary and
// served by the API handler under /ui/. The page needs no auth; its own
// calls to /v1/... carry the API key or a JWT the user enters once.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

type asset struct {
	body []byte
	etag string
}

// Handler serves the embedded assets under Prefix. Every asset carries a
// content-hash ETag and Cache-Control: no-cache, so a browser revalidates
// (304) and a new build is seen at once.
type Handler struct {
	assets map[string]asset
}

// New reads the embedded assets once.
func New() *Handler {
	h := &Handler{assets: map[string]asset{}}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h.assets[p] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return h
}

// Names lists the embedded assets with their sizes in bytes.
func (h *Handler) Names() map[string]int {
	out := map[string]int{}
	for n, a := range h.assets {
		out[n] = len(a.body)
	}
	return out
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))), "/")
	if name == "" {
		name = "index.html"
	}
	a, ok := h.assets[name]
	if !ok {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("No dashboard asset " + name + ".\n"))
		return
	}
	hd := w.Header()
	hd.Set("ETag", a.etag)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'")
	if strings.HasSuffix(name, ".js") {
		hd.Set("Content-Type", "text/javascript; charset=utf-8")
	}
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}
