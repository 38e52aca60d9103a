package chartcheck

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ErrUnknownKind means a rendered object has a kind the checks do not know.
var ErrUnknownKind = errors.New("unknown kind")

// Object is one rendered Kubernetes object, decoded into its Go type.
type Object struct {
	// Source is the template that rendered it ("orderflow/templates/gateway.yaml").
	Source string
	// APIVersion and Kind identify its type.
	APIVersion, Kind string
	// Name is metadata.name.
	Name string
	// Value is a pointer to the typed object (*appsv1.Deployment, ...).
	Value any
}

// String names the object for messages.
func (o Object) String() string { return o.Kind + "/" + o.Name }

// ServiceMonitor is the part of the Prometheus Operator's ServiceMonitor
// that the chart renders; decoding is strict, so any other field fails.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec selects Services and the ports to scrape.
type ServiceMonitorSpec struct {
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector *struct {
		MatchNames []string `json:"matchNames,omitempty"`
		Any        bool     `json:"any,omitempty"`
	} `json:"namespaceSelector,omitempty"`
	Endpoints []ServiceMonitorEndpoint `json:"endpoints"`
}

// ServiceMonitorEndpoint is one scraped port.
type ServiceMonitorEndpoint struct {
	Port          string `json:"port"`
	Path          string `json:"path,omitempty"`
	Interval      string `json:"interval,omitempty"`
	ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
	// Authorization is the credential the scraper presents.
	Authorization *SafeAuthorization `json:"authorization,omitempty"`
}

// SafeAuthorization is the Prometheus Operator's authorization of an
// endpoint: a header type (Bearer by default) and the Secret key holding
// the credentials.
type SafeAuthorization struct {
	Type        string `json:"type,omitempty"`
	Credentials *struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		Optional *bool  `json:"optional,omitempty"`
	} `json:"credentials,omitempty"`
}

// ScaledObject is the part of KEDA's ScaledObject (keda.sh/v1alpha1) that
// the chart renders, with KEDA's field names; decoding is strict, so any
// other field fails.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec names the scaled workload, its bounds and triggers.
type ScaledObjectSpec struct {
	ScaleTargetRef struct {
		APIVersion string `json:"apiVersion,omitempty"`
		Kind       string `json:"kind,omitempty"`
		Name       string `json:"name"`
	} `json:"scaleTargetRef"`
	PollingInterval *int32         `json:"pollingInterval,omitempty"`
	CooldownPeriod  *int32         `json:"cooldownPeriod,omitempty"`
	MinReplicaCount *int32         `json:"minReplicaCount,omitempty"`
	MaxReplicaCount *int32         `json:"maxReplicaCount,omitempty"`
	Triggers        []ScaleTrigger `json:"triggers"`
}

// ScaleTrigger is one KEDA trigger (scaler).
type ScaleTrigger struct {
	Type              string            `json:"type"`
	Name              string            `json:"name,omitempty"`
	Metadata          map[string]string `json:"metadata"`
	AuthenticationRef *struct {
		Name string `json:"name"`
		Kind string `json:"kind,omitempty"`
	} `json:"authenticationRef,omitempty"`
}

// TriggerAuthentication is the part of KEDA's TriggerAuthentication that
// the chart renders: trigger parameters read from Secret keys.
type TriggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// PrometheusRule is the part of the Prometheus Operator's PrometheusRule
// that the chart renders; decoding is strict, so any other field fails.
type PrometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              RuleFile `json:"spec"`
}

// RuleFile is a Prometheus rule file (and a PrometheusRule's spec).
type RuleFile struct {
	Groups []RuleGroup `json:"groups"`
}

// RuleGroup is a named group of rules.
type RuleGroup struct {
	Name     string `json:"name"`
	Interval string `json:"interval,omitempty"`
	Rules    []Rule `json:"rules"`
}

// Rule is an alerting or recording rule.
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// newObject returns a pointer to a zero value of the Go type of
// apiVersion/kind, or nil for a kind the chart must not render.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}
	case "v1/Secret":
		return &corev1.Secret{}
	case "v1/Service":
		return &corev1.Service{}
	case "v1/Pod":
		return &corev1.Pod{}
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &ServiceMonitor{}
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &PrometheusRule{}
	case "keda.sh/v1alpha1/ScaledObject":
		return &ScaledObject{}
	case "keda.sh/v1alpha1/TriggerAuthentication":
		return &TriggerAuthentication{}
	}
	return nil
}

var sourceLine = regexp.MustCompile(`(?m)^# Source: (.+)$`)

// Decode splits helm template output into documents and decodes each one
// strictly (unknown or duplicate fields fail) into its Kubernetes Go type.
func Decode(manifest []byte) ([]Object, error) {
	var objs []Object
	for _, doc := range bytes.Split(manifest, []byte("\n---")) {
		src := ""
		if m := sourceLine.FindSubmatch(doc); m != nil {
			src = string(m[1])
		}
		var head struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s: %w", src, err)
		}
		if head.Kind == "" && head.APIVersion == "" {
			continue // empty document (a template that rendered nothing)
		}
		v := newObject(head.APIVersion, head.Kind)
		if v == nil {
			return nil, fmt.Errorf("%s: %w %s/%s", src, ErrUnknownKind, head.APIVersion, head.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, v); err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", src, head.Kind, head.Metadata.Name, err)
		}
		objs = append(objs, Object{Source: src, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, Value: v})
	}
	return objs, nil
}
