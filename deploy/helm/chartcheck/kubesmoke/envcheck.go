package kubesmoke

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/orderflow/orderflow/deploy/helm/chartcheck"
)

// EnvNamesFunc returns the environment variables the binary of a container
// image reads (what it prints for --env-names).
type EnvNamesFunc func(ctx context.Context, image string) ([]string, error)

// Binary is the service binary an image runs: the last element of its
// repository ("localhost/orderflow/splitworker:1.2" → "splitworker").
func Binary(image string) string {
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return path.Base(repo)
}

// CheckEnv checks that every ORDERFLOW_* variable the manifest gives a
// container is read by that container's binary: a name set in the
// container's env must be read by its binary, a key of a ConfigMap loaded
// with envFrom (settings shared by several services) by at least one of
// the binaries loading it. A misspelt or renamed variable would otherwise be
// ignored and the service would run on its default.
func CheckEnv(ctx context.Context, m *chartcheck.Manifest, names EnvNamesFunc) []error {
	var errs []error
	reads := map[string]map[string]bool{} // image → names
	read := func(image string) (map[string]bool, error) {
		if r, ok := reads[image]; ok {
			return r, nil
		}
		list, err := names(ctx, image)
		if err != nil {
			return nil, fmt.Errorf("variables read by %s: %w", image, err)
		}
		r := map[string]bool{}
		for _, n := range list {
			r[n] = true
		}
		reads[image] = r
		return r, nil
	}
	type sharedKey struct{ configMap, key string }
	loaders := map[sharedKey][]string{}
	readBy := map[sharedKey]bool{}
	for _, d := range m.Deployments() {
		for _, c := range d.Spec.Template.Spec.Containers {
			r, err := read(c.Image)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			bin := Binary(c.Image)
			set := map[string]bool{} // every name the container is given
			for _, e := range c.Env {
				set[e.Name] = true
			}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef == nil {
					continue
				}
				o, ok := m.Get("ConfigMap", ef.ConfigMapRef.Name)
				if !ok {
					continue // Manifest.Check reports it
				}
				for k := range o.Value.(*corev1.ConfigMap).Data {
					set[k] = true
					if !strings.HasPrefix(k, "ORDERFLOW_") {
						continue
					}
					sk := sharedKey{ef.ConfigMapRef.Name, k}
					loaders[sk] = append(loaders[sk], bin)
					readBy[sk] = readBy[sk] || r[k]
				}
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "ORDERFLOW_") && !r[e.Name] {
					errs = append(errs, fmt.Errorf("deployment %s, container %s sets %s, which %s does not read%s",
						d.Name, c.Name, e.Name, bin, similar(e.Name, r, set)))
				}
			}
		}
	}
	keys := make([]sharedKey, 0, len(loaders))
	for k := range loaders {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b sharedKey) int { return strings.Compare(a.configMap+a.key, b.configMap+b.key) })
	for _, k := range keys {
		if !readBy[k] {
			errs = append(errs, fmt.Errorf("ConfigMap %s sets %s, which none of the binaries loading it (%s) reads",
				k.configMap, k.key, strings.Join(slices.Compact(slices.Sorted(slices.Values(loaders[k]))), ", ")))
		}
	}
	return errs
}

// similar names the variables the binary reads that share the longest
// prefix with name, as a hint for a typo or a rename; names the container
// is given already (set) are not what a typo or a rename left out.
func similar(name string, reads, set map[string]bool) string {
	best, bestLen := []string(nil), 0
	for r := range reads {
		if set[r] {
			continue
		}
		n := 0
		for n < len(r) && n < len(name) && r[n] == name[n] {
			n++
		}
		switch {
		case n > bestLen:
			best, bestLen = []string{r}, n
		case n == bestLen:
			best = append(best, r)
		}
	}
	if bestLen <= len("ORDERFLOW_") || len(best) > 3 {
		return ""
	}
	slices.Sort(best)
	return " (it reads " + strings.Join(best, ", ") + ")"
}
