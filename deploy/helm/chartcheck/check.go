package chartcheck

import (
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ShutdownBudget is how long a service may take to stop after SIGTERM; a
// pod's grace period must cover it plus its preStop pause.
const ShutdownBudget = 10

// Manifest is a decoded release, indexed for the checks.
type Manifest struct {
	Objects []Object
	byKind  map[string]map[string]Object
}

// NewManifest indexes objs.
func NewManifest(objs []Object) *Manifest {
	m := &Manifest{Objects: objs, byKind: map[string]map[string]Object{}}
	for _, o := range objs {
		if m.byKind[o.Kind] == nil {
			m.byKind[o.Kind] = map[string]Object{}
		}
		m.byKind[o.Kind][o.Name] = o
	}
	return m
}

// Get returns the object of kind and name.
func (m *Manifest) Get(kind, name string) (Object, bool) {
	o, ok := m.byKind[kind][name]
	return o, ok
}

// Deployments returns every Deployment.
func (m *Manifest) Deployments() []*appsv1.Deployment {
	var ds []*appsv1.Deployment
	for _, o := range m.Objects {
		if d, ok := o.Value.(*appsv1.Deployment); ok {
			ds = append(ds, d)
		}
	}
	return ds
}

// Check runs every check on the manifest and returns what failed.
func (m *Manifest) Check() []error {
	var errs []error
	seen := map[string]bool{}
	for _, o := range m.Objects {
		if seen[o.String()] {
			errs = append(errs, fmt.Errorf("%s rendered twice", o))
		}
		seen[o.String()] = true
		errs = append(errs, checkMeta(o)...)
		var oerrs []error
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			oerrs = m.checkDeployment(v)
		case *corev1.Service:
			oerrs = m.checkService(v)
		case *autoscalingv2.HorizontalPodAutoscaler:
			oerrs = m.checkHPA(v)
		case *policyv1.PodDisruptionBudget:
			oerrs = m.checkPDB(v)
		case *networkingv1.NetworkPolicy:
			oerrs = m.checkNetworkPolicy(v)
		case *networkingv1.Ingress:
			oerrs = m.checkIngress(v)
		case *ServiceMonitor:
			oerrs = m.checkServiceMonitor(v)
		case *ScaledObject:
			oerrs = m.checkScaledObject(v)
		}
		for _, err := range oerrs {
			errs = append(errs, fmt.Errorf("%s: %w", o, err))
		}
	}
	return errs
}

func checkMeta(o Object) []error {
	var errs []error
	nameErrs := validation.IsDNS1123Subdomain(o.Name)
	if o.Kind == "Service" {
		nameErrs = validation.IsDNS1035Label(o.Name)
	}
	for _, e := range nameErrs {
		errs = append(errs, fmt.Errorf("%s: name: %s", o, e))
	}
	var meta metav1.Object
	if mo, ok := o.Value.(metav1.Object); ok {
		meta = mo
	} else if sm, ok := o.Value.(*ServiceMonitor); ok {
		meta = &sm.ObjectMeta
	}
	for _, e := range metavalidation.ValidateLabels(meta.GetLabels(), field.NewPath("metadata", "labels")) {
		errs = append(errs, fmt.Errorf("%s: %w", o, e))
	}
	if meta.GetLabels()["app.kubernetes.io/instance"] == "" {
		errs = append(errs, fmt.Errorf("%s: no app.kubernetes.io/instance label", o))
	}
	return errs
}

// selects reports whether sel selects the labels set.
func selects(sel *metav1.LabelSelector, set map[string]string) (bool, error) {
	if sel == nil {
		return false, fmt.Errorf("no selector")
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	if s.Empty() {
		return false, fmt.Errorf("empty selector selects everything")
	}
	return s.Matches(labels.Set(set)), nil
}

// selected returns the Deployments whose pods sel selects.
func (m *Manifest) selected(sel *metav1.LabelSelector) ([]*appsv1.Deployment, error) {
	var ds []*appsv1.Deployment
	for _, d := range m.Deployments() {
		ok, err := selects(sel, d.Spec.Template.Labels)
		if err != nil {
			return nil, err
		}
		if ok {
			ds = append(ds, d)
		}
	}
	return ds, nil
}

// selectedOne returns the one Deployment whose pods sel selects.
func (m *Manifest) selectedOne(sel *metav1.LabelSelector) (*appsv1.Deployment, error) {
	ds, err := m.selected(sel)
	if err != nil {
		return nil, err
	}
	if len(ds) != 1 {
		return nil, fmt.Errorf("selector %s selects %d Deployments, want 1", metav1.FormatLabelSelector(sel), len(ds))
	}
	return ds[0], nil
}

// containerPort finds the port named or numbered p in the pod's containers.
func containerPort(spec *corev1.PodSpec, p intstr.IntOrString) bool {
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return true
			}
		}
	}
	return false
}

func (m *Manifest) checkDeployment(d *appsv1.Deployment) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if ok, err := selects(d.Spec.Selector, d.Spec.Template.Labels); err != nil || !ok {
		add("selector does not select its own pods (%v)", err)
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas < 0 {
		add("replicas %d < 0", *d.Spec.Replicas)
	}
	pod := &d.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		add("pod securityContext.runAsNonRoot is not true")
	} else {
		if sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			add("pod securityContext.runAsUser is not a non-root UID")
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("pod seccompProfile is not RuntimeDefault")
		}
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		add("service account token is mounted")
	}
	if pod.ServiceAccountName != "" && pod.ServiceAccountName != "default" {
		if _, ok := m.Get("ServiceAccount", pod.ServiceAccountName); !ok {
			add("ServiceAccount %s is not rendered", pod.ServiceAccountName)
		}
	}
	if len(pod.Containers) == 0 {
		add("no containers")
	}
	for i := range pod.Containers {
		for _, err := range m.checkContainer(pod, &pod.Containers[i]) {
			add("container %s: %w", pod.Containers[i].Name, err)
		}
	}
	return errs
}

// checkContainer checks one container of pod: image, security context,
// probes, resources, shutdown time and environment.
func (m *Manifest) checkContainer(pod *corev1.PodSpec, c *corev1.Container) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if err := checkImage(c.Image); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkSecurityContext(c.SecurityContext)...)
	errs = append(errs, checkProbes(pod, c)...)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := c.Resources.Requests[r]; !ok || q.IsZero() {
			add("no %s request", r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		add("no memory limit")
	}
	grace := int64(30)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	pause := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pause = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if grace < ShutdownBudget+pause {
		add("terminationGracePeriodSeconds %d < %d s shutdown + %d s preStop", grace, ShutdownBudget, pause)
	}
	names := map[string]bool{}
	for _, e := range c.Env {
		if names[e.Name] {
			add("env %s set twice", e.Name)
		}
		names[e.Name] = true
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			errs = append(errs, m.checkSecretRef(e.Name, e.ValueFrom.SecretKeyRef)...)
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if _, ok := m.Get("ConfigMap", ef.ConfigMapRef.Name); !ok {
				add("envFrom ConfigMap %s is not rendered", ef.ConfigMapRef.Name)
			}
		}
	}
	return errs
}

// checkSecurityContext wants a read-only root filesystem, no privilege
// escalation, no root user and every capability dropped.
func checkSecurityContext(sc *corev1.SecurityContext) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case sc == nil:
		add("no securityContext")
	default:
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			add("root filesystem is writable")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			add("privilege escalation allowed")
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("privileged")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			add("runs as root")
		}
		if sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) > 0 {
			add("capabilities are not drop [ALL]")
		}
	}
	return errs
}

// checkProbes wants the readiness and liveness probes on the container's
// own ports, HTTP on /readyz and /livez or gRPC health.
func checkProbes(pod *corev1.PodSpec, c *corev1.Container) []error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// Liveness must not depend on Redis or RabbitMQ (an outage would
	// restart every pod): /livez; readiness runs the dependency checks:
	// /readyz.
	wantPath := map[string]string{"readiness": "/readyz", "liveness": "/livez"}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil {
			add("no %s probe", name)
			continue
		}
		switch {
		case p.HTTPGet != nil:
			if p.HTTPGet.Path != wantPath[name] {
				add("%s probe path %q, want %s", name, p.HTTPGet.Path, wantPath[name])
			}
			if !containerPort(pod, p.HTTPGet.Port) {
				add("%s probe port %s is not a container port", name, p.HTTPGet.Port.String())
			}
		case p.GRPC != nil:
			if !containerPort(pod, intstr.FromInt32(p.GRPC.Port)) {
				add("%s probe gRPC port %d is not a container port", name, p.GRPC.Port)
			}
		default:
			add("%s probe is neither HTTP %s nor gRPC health", name, wantPath[name])
		}
	}
	return errs
}

// checkImage wants repository:tag or repository@digest, never latest.
func checkImage(image string) error {
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return fmt.Errorf("image %q has no tag", image)
	}
	if tag := image[i+1:]; tag == "" || tag == "latest" {
		return fmt.Errorf("image %q: tag must be pinned, not %q", image, tag)
	}
	return nil
}

// checkSecretRef checks a reference to a Secret the release renders; one
// managed elsewhere (existingSecret) cannot be checked here, so a missing
// one is an error only when the release renders credentials of its own
// (a Secret that is not a TLS certificate).
func (m *Manifest) checkSecretRef(env string, ref *corev1.SecretKeySelector) []error {
	o, ok := m.Get("Secret", ref.Name)
	if !ok {
		for _, s := range m.byKind["Secret"] {
			if s.Value.(*corev1.Secret).Type != corev1.SecretTypeTLS {
				return []error{fmt.Errorf("env %s: Secret %s is not rendered", env, ref.Name)}
			}
		}
		return nil
	}
	s := o.Value.(*corev1.Secret)
	if _, ok := s.Data[ref.Key]; !ok {
		if _, ok := s.StringData[ref.Key]; !ok {
			return []error{fmt.Errorf("env %s: Secret %s has no key %s", env, ref.Name, ref.Key)}
		}
	}
	return nil
}

// checkScaledObject checks that a KEDA ScaledObject scales a rendered
// Deployment that sets no replica count of its own and no HPA also
// scales, within sane bounds, and that each trigger's authentication is a
// rendered TriggerAuthentication whose Secret keys exist.
func (m *Manifest) checkScaledObject(so *ScaledObject) []error {
	var errs []error
	ref := so.Spec.ScaleTargetRef
	o, ok := m.Get("Deployment", ref.Name)
	switch {
	case ref.Kind != "Deployment" || ref.APIVersion != "apps/v1":
		errs = append(errs, fmt.Errorf("scales %s %s, want an apps/v1 Deployment", ref.APIVersion, ref.Kind))
	case !ok:
		errs = append(errs, fmt.Errorf("scales Deployment %s, which is not rendered", ref.Name))
	case o.Value.(*appsv1.Deployment).Spec.Replicas != nil:
		errs = append(errs, fmt.Errorf("the Deployment %s sets replicas, which would fight KEDA on every upgrade", ref.Name))
	}
	for _, h := range m.byKind["HorizontalPodAutoscaler"] {
		if h.Value.(*autoscalingv2.HorizontalPodAutoscaler).Spec.ScaleTargetRef.Name == ref.Name {
			errs = append(errs, fmt.Errorf("the Deployment %s is also scaled by the HPA %s", ref.Name, h.Name))
		}
	}
	if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || *so.Spec.MinReplicaCount > *so.Spec.MaxReplicaCount {
		errs = append(errs, fmt.Errorf("replica bounds %v..%v, want min <= max, both set", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount))
	}
	if len(so.Spec.Triggers) == 0 {
		errs = append(errs, errors.New("no trigger"))
	}
	for _, tr := range so.Spec.Triggers {
		if tr.AuthenticationRef == nil {
			continue
		}
		a, ok := m.Get("TriggerAuthentication", tr.AuthenticationRef.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("trigger %s: TriggerAuthentication %s is not rendered", tr.Name, tr.AuthenticationRef.Name))
			continue
		}
		for _, r := range a.Value.(*TriggerAuthentication).Spec.SecretTargetRef {
			errs = append(errs, m.checkSecretRef("trigger "+tr.Name+" "+r.Parameter, &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: r.Name}, Key: r.Key})...)
		}
	}
	return errs
}

func (m *Manifest) checkService(s *corev1.Service) []error {
	d, err := m.selectedOne(&metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, p := range s.Spec.Ports {
		if !containerPort(&d.Spec.Template.Spec, p.TargetPort) {
			errs = append(errs, fmt.Errorf("port %s: targetPort %s is not a port of Deployment %s", p.Name, p.TargetPort.String(), d.Name))
		}
	}
	return errs
}

func (m *Manifest) checkHPA(h *autoscalingv2.HorizontalPodAutoscaler) []error {
	var errs []error
	ref := h.Spec.ScaleTargetRef
	o, ok := m.Get(ref.Kind, ref.Name)
	if !ok || ref.APIVersion != "apps/v1" {
		return []error{fmt.Errorf("scale target %s %s/%s is not rendered", ref.APIVersion, ref.Kind, ref.Name)}
	}
	if d, ok := o.Value.(*appsv1.Deployment); ok && d.Spec.Replicas != nil {
		errs = append(errs, fmt.Errorf("replicas set on Deployment %s although the HPA owns them", d.Name))
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		errs = append(errs, fmt.Errorf("replicas range %v..%d is invalid", h.Spec.MinReplicas, h.Spec.MaxReplicas))
	}
	if len(h.Spec.Metrics) == 0 {
		errs = append(errs, fmt.Errorf("no metrics"))
	}
	return errs
}

func (m *Manifest) checkPDB(p *policyv1.PodDisruptionBudget) []error {
	var errs []error
	if (p.Spec.MinAvailable == nil) == (p.Spec.MaxUnavailable == nil) {
		errs = append(errs, fmt.Errorf("exactly one of minAvailable and maxUnavailable must be set"))
	}
	if _, err := m.selectedOne(p.Spec.Selector); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (m *Manifest) checkNetworkPolicy(n *networkingv1.NetworkPolicy) []error {
	d, err := m.selectedOne(&n.Spec.PodSelector)
	if err != nil {
		return []error{err}
	}
	var errs []error
	if len(n.Spec.Ingress) == 0 {
		errs = append(errs, fmt.Errorf("no ingress rule: every port is closed"))
	}
	for _, rule := range n.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port == nil || !containerPort(&d.Spec.Template.Spec, *p.Port) {
				errs = append(errs, fmt.Errorf("port %v is not a port of Deployment %s", p.Port, d.Name))
			}
		}
		for _, from := range rule.From {
			if from.PodSelector == nil || from.NamespaceSelector != nil || from.IPBlock != nil {
				continue // a peer outside the release
			}
			if ds, err := m.selected(from.PodSelector); err != nil || (len(ds) == 0 && !m.selectsPod(from.PodSelector)) {
				errs = append(errs, fmt.Errorf("peer %s selects no pod of the release (%v)", metav1.FormatLabelSelector(from.PodSelector), err))
			}
		}
	}
	return errs
}

func (m *Manifest) checkIngress(in *networkingv1.Ingress) []error {
	var errs []error
	for _, r := range in.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for _, p := range r.HTTP.Paths {
			svc := p.Backend.Service
			if svc == nil {
				errs = append(errs, fmt.Errorf("path %s has no service backend", p.Path))
				continue
			}
			if err := m.servicePort(svc.Name, svc.Port.Name, svc.Port.Number); err != nil {
				errs = append(errs, fmt.Errorf("path %s: %w", p.Path, err))
			}
		}
	}
	return errs
}

// servicePort checks that Service name has the port named or numbered.
func (m *Manifest) servicePort(name, portName string, number int32) error {
	o, ok := m.Get("Service", name)
	if !ok {
		return fmt.Errorf("no Service %s rendered", name)
	}
	for _, p := range o.Value.(*corev1.Service).Spec.Ports {
		if (portName != "" && p.Name == portName) || (portName == "" && p.Port == number) {
			return nil
		}
	}
	return fmt.Errorf("no port in Service %s matches %q/%d", name, portName, number)
}

func (m *Manifest) checkServiceMonitor(sm *ServiceMonitor) []error {
	var errs []error
	var matched []string
	for _, o := range m.Objects {
		if s, ok := o.Value.(*corev1.Service); ok {
			ok, err := selects(&sm.Spec.Selector, s.Labels)
			if err != nil {
				return []error{err}
			}
			if ok {
				matched = append(matched, s.Name)
			}
		}
	}
	if len(matched) != 1 {
		return []error{fmt.Errorf("selector matches Services %v, want one", matched)}
	}
	if len(sm.Spec.Endpoints) == 0 {
		errs = append(errs, fmt.Errorf("no endpoints"))
	}
	for _, e := range sm.Spec.Endpoints {
		if err := m.servicePort(matched[0], e.Port, 0); err != nil {
			errs = append(errs, err)
		}
		if e.Path != "/metrics" {
			errs = append(errs, fmt.Errorf("endpoint path %q, want /metrics", e.Path))
		}
	}
	return errs
}

// selectsPod reports whether sel selects a bare Pod of the release (the
// helm test hook's).
func (m *Manifest) selectsPod(sel *metav1.LabelSelector) bool {
	for _, o := range m.Objects {
		if p, ok := o.Value.(*corev1.Pod); ok {
			if ok, err := selects(sel, p.Labels); err == nil && ok {
				return true
			}
		}
	}
	return false
}
