// Package buildinfo reports the version of the running binary, for the
// service.version resource attribute of traces and the
// orderflow_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info describes the running binary.
type Info struct {
	// Version is the main module's version as the Go toolchain stamped it
	// (a tag, or a pseudo-version from the VCS revision), or "unknown".
	Version string
	// Revision is the VCS revision the binary was built from, or "unknown".
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

var read = sync.OnceValue(func() Info {
	info := Info{Version: "unknown", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		info.Version = v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			info.Revision = s.Value
		}
	}
	if info.Version == "unknown" && info.Revision != "unknown" {
		info.Version = info.Revision
	}
	return info
})

// Read returns the running binary's build information.
func Read() Info { return read() }
