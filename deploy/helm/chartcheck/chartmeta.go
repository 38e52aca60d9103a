package chartcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// repoFileURL is where Chart.yaml's links to files of the repository
// point: the raw file on the main branch.
const repoFileURL = "https://raw.githubusercontent.com/orderflow/orderflow/main/"

// CheckChartMetadata checks the metadata Artifact Hub and `helm show
// chart` present of the Chart.yaml data: home, sources, maintainers (each
// with a name) and an icon, which, when it points into this repository,
// must name a file that exists under repoRoot.
func CheckChartMetadata(data []byte, repoRoot string) []error {
	var c struct {
		Home        string   `json:"home"`
		Sources     []string `json:"sources"`
		Icon        string   `json:"icon"`
		Maintainers []struct {
			Name, Email, URL string
		} `json:"maintainers"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		return []error{fmt.Errorf("parse the chart metadata: %w", err)}
	}
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf("chart metadata: "+format, a...)) }
	if !strings.HasPrefix(c.Home, "https://") {
		add("home %q: want an https URL of the project", c.Home)
	}
	if len(c.Sources) == 0 {
		add("no sources")
	}
	for _, s := range c.Sources {
		if !strings.HasPrefix(s, "https://") {
			add("source %q: want an https URL", s)
		}
	}
	if len(c.Maintainers) == 0 {
		add("no maintainers")
	}
	for i, m := range c.Maintainers {
		if m.Name == "" {
			add("maintainers[%d] has no name", i)
		}
	}
	switch {
	case c.Icon == "":
		add("no icon")
	case !strings.HasPrefix(c.Icon, "https://"):
		add("icon %q: want an https URL", c.Icon)
	case strings.HasPrefix(c.Icon, repoFileURL):
		rel := strings.TrimPrefix(c.Icon, repoFileURL)
		if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(rel))); err != nil {
			add("icon %q: %s is not in the repository", c.Icon, rel)
		}
	}
	return errs
}
