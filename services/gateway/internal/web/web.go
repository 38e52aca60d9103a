// Package web serves the gateway's browser page (dev sign-in, order
// splits with a live task view, task history, payments) at "/", the
// operations page at "/ops" and a reader for the OpenAPI document at
// "/docs". Everything is embedded in
// the binary and loads from the gateway itself, so it works offline.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// csp lets the page load scripts, styles and data only from its own origin.
const csp = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Pages returns the handlers to mount on the gateway's outer mux, by
// pattern: the page at "/", the operations page at "/ops", the API reader
// at "/docs" and their assets
// under "/assets/".
func Pages() map[string]http.Handler {
	assets, err := fs.Sub(static, "static")
	if err != nil {
		// The embedded directory is fixed at build time.
		panic(err)
	}
	files := http.FileServerFS(assets)
	page := func(name string) http.Handler {
		return secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-cache")
			http.ServeFileFS(w, r, assets, name)
		}))
	}
	return map[string]http.Handler{
		"GET /{$}":     page("index.html"),
		"GET /docs":    page("docs.html"),
		"GET /ops":     page("ops.html"),
		"GET /assets/": secure(noCache(http.StripPrefix("/assets/", files))),
	}
}

func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// noCache makes browsers revalidate assets, so a new gateway's page is
// never mixed with an old script.
func noCache(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
