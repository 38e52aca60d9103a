package web_test

import (
	"encoding/json"
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
		{"/assets/ops-charts.js", http.StatusOK, "text/javascript", "/v1/ops/rates"},
		{"/assets/lib/uplot/uPlot.iife.min.js", http.StatusOK, "text/javascript", "uPlot"},
		{"/assets/lib/uplot/uPlot.min.css", http.StatusOK, "text/css", ".uplot"},
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
// origin, so it works offline. The vendored libraries under lib/ (their
// URLs are in comments and SVG namespaces) are the pinned packages' files
// (TestVendoredLibrariesArePinned); the Content-Security-Policy keeps
// them to the gateway's origin too.
func TestAssetsAreLocal(t *testing.T) {
	err := fs.WalkDir(os.DirFS("static"), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(path, "lib/") {
			return nil
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

// TestVendoredLibrariesArePinned checks that the vendored uPlot is the
// version thirdparty/package-lock.json pins, with its licence beside it.
// `make web-vendor-check` reproduces the files byte for byte from the
// npm registry.
func TestVendoredLibrariesArePinned(t *testing.T) {
	b, err := os.ReadFile("thirdparty/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Version   string `json:"version"`
			Integrity string `json:"integrity"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatal(err)
	}
	pin := lock.Packages["node_modules/uplot"]
	if pin.Version == "" || !strings.HasPrefix(pin.Integrity, "sha512-") {
		t.Fatalf("package-lock.json pins uplot as %+v, want a version and its sha512 integrity", pin)
	}
	js, err := os.ReadFile("static/lib/uplot/uPlot.iife.min.js")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/*! https://github.com/leeoniya/uPlot (v" + pin.Version + ") */"; !strings.HasPrefix(string(js), want) {
		t.Errorf("uPlot.iife.min.js starts %q, want %q (the pinned version)", string(js[:min(len(js), 60)]), want)
	}
	if lic, err := os.ReadFile("static/lib/uplot/LICENSE"); err != nil || !strings.Contains(string(lic), "MIT License") {
		t.Errorf("static/lib/uplot/LICENSE = %q (%v), want uPlot's MIT licence", lic, err)
	}
}
