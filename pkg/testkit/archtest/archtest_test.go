package archtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/stacktest"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := stacktest.RepoRoot()
	if err != nil {
		t.Fatalf("RepoRoot: %v", err)
	}
	return root
}

// TestFloorPlan fails on any import that crosses a forbidden boundary in the
// repository as it is.
func TestFloorPlan(t *testing.T) {
	pkgs, err := Load(repoRoot(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages, want the whole workspace", len(pkgs))
	}
	for _, v := range Check(pkgs) {
		t.Errorf("forbidden import: %s", v)
	}
}

// TestFloorPlanCatchesForbiddenImports adds imports that break the rules
// to real packages through a go list overlay, so the tree is untouched,
// and expects each to be reported.
func TestFloorPlanCatchesForbiddenImports(t *testing.T) {
	root := repoRoot(t)
	tests := []struct {
		name, dir, pkg, imp string
	}{
		{"engine imports a simulator", "pkg/engine/taskstore", "taskstore", "pkg/sim/paysim"},
		{"service imports a test kit", "services/gateway/internal/tasks", "tasks", "pkg/testkit/testenv"},
		{"simulator imports an engine", "services/paysim/cmd/paysim", "main", "pkg/engine/lease"},
		{"platform imports an engine", "pkg/platform/config", "config", "pkg/engine/lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp := t.TempDir()
			probe := filepath.Join(tmp, "probe.go")
			src := "package " + tt.pkg + "\n\nimport _ \"" + Module + tt.imp + "\"\n"
			if err := os.WriteFile(probe, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{
				filepath.Join(root, tt.dir, "zz_archtest_probe.go"): probe,
			}})
			ov := filepath.Join(tmp, "overlay.json")
			if err := os.WriteFile(ov, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			pkgs, err := Load(root, ov)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.dir + " imports " + tt.imp
			var found bool
			for _, v := range Check(pkgs) {
				if v.String() == want {
					found = true
				}
			}
			if !found {
				t.Errorf("Check did not report %q; got %v", want, Check(pkgs))
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		path string
		want Layer
	}{
		{Module + "pkg/engine/slotpool", Layer{Kind: "engine"}},
		{Module + "pkg/platform/auth", Layer{Kind: "platform"}},
		{Module + "pkg/provider/wechatpay", Layer{Kind: "provider"}},
		{Module + "pkg/sim/paysim", Layer{Kind: "sim"}},
		{Module + "pkg/testkit/chaos", Layer{Kind: "testkit"}},
		{Module + "pkg/gen/orderflow/task/v1", Layer{Kind: "gen"}},
		{Module + "pkg/util", Layer{Kind: "pkg-unplaced"}},
		{Module + "services/gateway/internal/app", Layer{Kind: "service", Service: "gateway"}},
		{Module + "services/paysim/cmd/paysim", Layer{Kind: "simservice", Service: "paysim"}},
		{"github.com/redis/go-redis/v9", Layer{Kind: "external"}},
	}
	for _, tt := range tests {
		if got := Classify(tt.path); got != tt.want {
			t.Errorf("Classify(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}
