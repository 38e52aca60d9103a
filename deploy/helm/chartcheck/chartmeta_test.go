package chartcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestChartMetadata(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := CheckChartMetadata(good, repoRoot); len(errs) != 0 {
		t.Fatalf("CheckChartMetadata(Chart.yaml) = %v, want no errors", errs)
	}
	for _, tc := range []struct{ name, from, to, want string }{
		{"no home", "home: https://", "homepage: https://", "home"},
		{"no sources", "sources:\n  - https://github.com/orderflow/orderflow\n", "", "no sources"},
		{"no maintainers", "maintainers:\n  - name: orderflow maintainers\n", "maintainers:\n  - url: x\n", "has no name"},
		{"no icon", "icon: ", "iconURL: ", "no icon"},
		{"icon missing from the repository", "orderflow/icon.svg", "orderflow/icon.png", "not in the repository"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(good), tc.from) {
				t.Fatalf("test case does not apply: %q not in Chart.yaml", tc.from)
			}
			bad := strings.Replace(string(good), tc.from, tc.to, 1)
			var msgs []string
			for _, err := range CheckChartMetadata([]byte(bad), repoRoot) {
				msgs = append(msgs, err.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("CheckChartMetadata(%s) = %q, want an error containing %q", tc.name, msgs, tc.want)
			}
		})
	}
}
