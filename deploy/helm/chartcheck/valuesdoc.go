package chartcheck

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Markers around the generated part of the chart's README.
const (
	ValuesDocBegin = "<!-- values:begin (generated from values.yaml by `make chart-readme`; do not edit) -->"
	ValuesDocEnd   = "<!-- values:end -->"
)

// freeForm are keys whose maps are the user's own (labels, variables,
// scheduling rules): documented as one value, not key by key.
var freeForm = map[string]bool{
	"extra": true, "labels": true, "annotations": true, "env": true, "podAnnotations": true,
	"podLabels": true, "nodeSelector": true, "affinity": true,
}

// serviceValueDocs describe the block every service (gateway, splitWorker,
// reconciler, paysim, fulfilmentsim) takes; values.yaml describes it once
// in a comment.
var serviceValueDocs = map[string]string{
	"enabled":                 "renders the service",
	"image.repository":        "image repository",
	"image.tag":               "image tag (empty: the chart's appVersion)",
	"image.digest":            "image digest; overrides the tag",
	"image.pullPolicy":        "image pull policy",
	"replicas":                "replicas when neither autoscaling nor KEDA scales the service",
	"resources.requests":      "container resource requests",
	"resources.limits":        "container resource limits",
	"env":                     "extra environment variables (map), overriding the chart's",
	"extraEnv":                "extra environment variables as EnvVar objects (e.g. valueFrom)",
	"autoscaling.enabled":     "renders a HorizontalPodAutoscaler (CPU, optionally memory)",
	"autoscaling.minReplicas": "HPA minimum replicas",
	"autoscaling.maxReplicas": "HPA maximum replicas",
	"autoscaling.targetCPUUtilizationPercentage": "HPA target CPU utilisation",
	"pdb.enabled":                   "renders a PodDisruptionBudget",
	"pdb.maxUnavailable":            "PodDisruptionBudget maxUnavailable (or set pdb.minAvailable)",
	"terminationGracePeriodSeconds": "pod termination grace period; at least the 10 s shutdown budget plus preStopSleepSeconds",
	"preStopSleepSeconds":           "preStop pause so endpoints are removed before shutdown begins (0: none)",
	"podAnnotations":                "annotations of the pods",
	"podLabels":                     "labels of the pods",
	"nodeSelector":                  "node selector of the pods",
	"tolerations":                   "tolerations of the pods",
	"affinity":                      "affinity of the pods (empty: the chart's soft anti-affinity)",
	"service.type":                  "Service type",
	"service.annotations":           "Service annotations",
}

// leaf is one documented value.
type leaf struct {
	path, def, doc string
}

// ValuesDoc renders the chart README's value tables from values.yaml: one
// row per value with its default and its comment, and one table for the
// block every service takes, with each service's defaults. It fails when a
// value has no description.
func ValuesDoc(values []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("values.yaml: not a map")
	}
	top := doc.Content[0]
	var general []leaf
	var services []string
	perService := map[string]map[string]string{}
	serviceDoc := map[string]string{}
	for i := 0; i < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if isService(v) {
			services = append(services, k.Value)
			serviceDoc[k.Value] = comment(k)
			var ls []leaf
			collect(v, "", "", &ls)
			perService[k.Value] = map[string]string{}
			for _, l := range ls {
				perService[k.Value][l.path] = l.def
			}
			continue
		}
		collect(v, k.Value, comment(k), &general)
	}
	var missing []string
	var b bytes.Buffer
	b.WriteString("| value | default | meaning |\n| --- | --- | --- |\n")
	for _, l := range general {
		if l.doc == "" {
			missing = append(missing, l.path)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", l.path, code(l.def), cell(l.doc))
	}
	b.WriteString("\nEvery service takes the same block; its defaults differ per service:\n\n")
	for _, s := range services {
		fmt.Fprintf(&b, "- `%s`: %s\n", s, cell(serviceDoc[s]))
	}
	b.WriteString("\n| value | meaning |")
	for _, s := range services {
		fmt.Fprintf(&b, " `%s` |", s)
	}
	b.WriteString("\n| --- | --- |" + strings.Repeat(" --- |", len(services)) + "\n")
	keys := map[string]bool{}
	for _, s := range services {
		for k := range perService[s] {
			keys[k] = true
		}
	}
	var order []string
	for k := range keys {
		order = append(order, k)
	}
	sort.Strings(order)
	for _, k := range order {
		d, ok := serviceValueDocs[k]
		if !ok {
			missing = append(missing, "<service>."+k)
		}
		fmt.Fprintf(&b, "| `%s` | %s |", k, cell(d))
		for _, s := range services {
			def, ok := perService[s][k]
			if !ok {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %s |", code(def))
		}
		b.WriteString("\n")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("values without a description (a comment above the key in values.yaml): %s", strings.Join(missing, ", "))
	}
	return b.Bytes(), nil
}

// isService reports whether a top-level value is a service block.
func isService(v *yaml.Node) bool {
	if v.Kind != yaml.MappingNode {
		return false
	}
	var image, replicas bool
	for i := 0; i < len(v.Content); i += 2 {
		image = image || v.Content[i].Value == "image"
		replicas = replicas || v.Content[i].Value == "replicas"
	}
	return image && replicas
}

// collect appends the leaves under v (at path, described by doc) to out.
func collect(v *yaml.Node, path, doc string, out *[]leaf) {
	last := path[strings.LastIndex(path, ".")+1:]
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 || v.Style&yaml.FlowStyle != 0 || freeForm[last] {
		*out = append(*out, leaf{path: path, def: flow(v), doc: doc})
		return
	}
	for i := 0; i < len(v.Content); i += 2 {
		k := v.Content[i]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		collect(v.Content[i+1], p, comment(k), out)
	}
}

// comment is a key's comment as one line.
func comment(k *yaml.Node) string {
	c := k.HeadComment
	// Only the paragraph right above the key belongs to it.
	if i := strings.LastIndex(c, "\n\n"); i >= 0 {
		c = c[i+2:]
	}
	if c == "" {
		c = k.LineComment
	}
	var parts []string
	for _, line := range strings.Split(c, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, " ")
}

// flow renders a value on one line.
func flow(v *yaml.Node) string {
	if v.Kind == yaml.ScalarNode {
		if v.Tag == "!!str" && v.Value == "" {
			return `""`
		}
		return v.Value
	}
	c := *v
	setFlow(&c)
	out, err := yaml.Marshal(&c)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func setFlow(n *yaml.Node) {
	n.Style |= yaml.FlowStyle
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	n.Content = append([]*yaml.Node(nil), n.Content...)
	for i, c := range n.Content {
		cc := *c
		setFlow(&cc)
		n.Content[i] = &cc
	}
}

func code(s string) string { return "`" + strings.ReplaceAll(s, "|", `\|`) + "`" }

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// SpliceValuesDoc replaces the generated part of readme (between the
// markers) with table.
func SpliceValuesDoc(readme, table []byte) ([]byte, error) {
	i := bytes.Index(readme, []byte(ValuesDocBegin))
	j := bytes.Index(readme, []byte(ValuesDocEnd))
	if i < 0 || j < i {
		return nil, fmt.Errorf("README: markers %q … %q not found", ValuesDocBegin, ValuesDocEnd)
	}
	var out bytes.Buffer
	out.Write(readme[:i+len(ValuesDocBegin)])
	out.WriteString("\n\n")
	out.Write(table)
	out.WriteString("\n")
	out.Write(readme[j:])
	return out.Bytes(), nil
}
