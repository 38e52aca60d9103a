package web_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/services/gateway/internal/web"
)

func TestPages(t *testing.T) {
	mux := http.NewServeMux()
	for pattern, h := range web.Pages() {
		mux.Handle(pattern, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tests := []struct {
		path       string
		wantStatus int
		wantType   string
		wantBody   string
	}{
		{"/", http.StatusOK, "text/html", `<script src="/assets/app.js" defer>`},
		{"/docs", http.StatusOK, "text/html", `<script src="/assets/docs.js" defer>`},
		{"/ops", http.StatusOK, "text/html", `<script src="/assets/ops.js" defer>`},
		{"/assets/app.js", http.StatusOK, "text/javascript", "POLL_TRIES"},
		{"/assets/ops.js", http.StatusOK, "text/javascript", "/v1/ops/overview"},
		{"/assets/docs.js", http.StatusOK, "text/javascript", "/openapi.json"},
		{"/assets/app.css", http.StatusOK, "text/css", ":focus-visible"},
		{"/assets/icon.svg", http.StatusOK, "image/svg+xml", "<svg"},
		{"/assets/missing.js", http.StatusNotFound, "", ""},
		{"/nope", http.StatusNotFound, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET %s = %d, want %d", tt.path, resp.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus != http.StatusOK {
				return
			}
			if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, tt.wantType) {
				t.Errorf("GET %s Content-Type = %q, want %s", tt.path, got, tt.wantType)
			}
			if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'self'") {
				t.Errorf("GET %s Content-Security-Policy = %q, want default-src 'self'", tt.path, got)
			}
			if !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("GET %s body does not contain %q", tt.path, tt.wantBody)
			}
		})
	}
}

// TestAssetsAreLocal checks that the page loads nothing from another
// origin, so it works offline.
func TestAssetsAreLocal(t *testing.T) {
	err := fs.WalkDir(os.DirFS("static"), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join("static", path))
		if err != nil {
			return err
		}
		for _, bad := range []string{"http://", "https://", `src="//`, `href="//`, "@import"} {
			if strings.Contains(string(b), bad) && !(bad == "http://" && path == "icon.svg") {
				t.Errorf("%s contains %q: assets must come from the gateway itself", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
