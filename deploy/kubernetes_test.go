package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// overlays are the kustomize overlays an operator applies; each must build and pass the policy.
var overlays = []string{"kubernetes/overlays/dev", "kubernetes/overlays/production"}

// externalSecrets are Secrets an overlay expects the operator to create (docs/deploy.md).
var externalSecrets = map[string][]string{
	"kubernetes/overlays/dev":        nil,
	"kubernetes/overlays/production": {"converge-secrets", "converge-tls"},
}

// kinds are the types the manifests may use, by apiVersion and kind; anything else fails.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"batch/v1/Job":                           func() any { return &batchv1.Job{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":           func() any { return &networkingv1.Ingress{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// manifest is one built object, decoded strictly into its k8s.io/api type.
type manifest struct {
	kind, name string
	obj        any
}

// build runs kustomize on dir (as `kubectl apply -k` would) and decodes every object strictly:
// a field its type does not have fails, as does a kind not in kinds.
func build(t *testing.T, dir string) ([]manifest, error) {
	t.Helper()
	return buildFS(t, filesys.MakeFsOnDisk(), dir)
}

func buildFS(t *testing.T, fs filesys.FileSystem, dir string) ([]manifest, error) {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(fs, dir)
	if err != nil {
		return nil, err
	}
	var out []manifest
	for _, r := range rm.Resources() {
		raw, err := r.AsYAML()
		require.NoError(t, err)
		key := r.GetApiVersion() + "/" + r.GetKind()
		newObj, ok := kinds[key]
		if !ok {
			return nil, fmt.Errorf("%s %s: kind %s is not one the deployment is checked for", r.GetKind(), r.GetName(), key)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(raw, obj); err != nil {
			return nil, fmt.Errorf("%s %s: %w", r.GetKind(), r.GetName(), err)
		}
		out = append(out, manifest{kind: r.GetKind(), name: r.GetName(), obj: obj})
	}
	return out, nil
}

func TestKubernetesOverlaysBuildAndPassPolicy(t *testing.T) {
	t.Parallel()
	for _, dir := range overlays {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			ms, err := build(t, dir)
			require.NoError(t, err)
			require.NotEmpty(t, ms)
			checkPolicy(t, ms, externalSecrets[dir])
		})
	}
}

// checkPolicy is what every overlay must satisfy: the five services are there, every pod is
// non-root with a read-only root filesystem, no privilege escalation and RuntimeDefault seccomp,
// every container has limits and a pinned image and every long-running one probes, every Secret
// and ConfigMap referenced exists (or is one the operator creates), every Service selects a pod.
func checkPolicy(t *testing.T, ms []manifest, external []string) {
	t.Helper()
	secrets, configMaps := map[string]map[string]bool{}, map[string]map[string]bool{}
	var config map[string]string
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *corev1.Secret:
			secrets[m.name] = keys(o.Data, o.StringData)
		case *corev1.ConfigMap:
			configMaps[m.name] = keys(nil, o.Data)
			if m.name == "converge-config" || strings.HasPrefix(m.name, "converge-config-") {
				config = o.Data
			}
		}
	}
	require.NotNil(t, config, "converge-config")

	pods := map[string]corev1.PodTemplateSpec{}
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			pods[m.kind+"/"+m.name] = o.Spec.Template
			require.Equal(t, o.Spec.Selector.MatchLabels, subset(o.Spec.Template.Labels, o.Spec.Selector.MatchLabels), m.name)
		case *appsv1.StatefulSet:
			pods[m.kind+"/"+m.name] = o.Spec.Template
			require.Equal(t, o.Spec.Selector.MatchLabels, subset(o.Spec.Template.Labels, o.Spec.Selector.MatchLabels), m.name)
		case *batchv1.Job:
			pods[m.kind+"/"+m.name] = o.Spec.Template
		}
	}
	for _, svc := range convergeServices {
		require.Contains(t, pods, "Deployment/converge-"+svc)
	}

	for name, pod := range pods {
		spec := pod.Spec
		require.NotNil(t, spec.SecurityContext, name)
		require.NotNil(t, spec.SecurityContext.RunAsNonRoot, name)
		require.True(t, *spec.SecurityContext.RunAsNonRoot, name)
		require.NotNil(t, spec.SecurityContext.RunAsUser, name)
		require.NotZero(t, *spec.SecurityContext.RunAsUser, name)
		require.NotNil(t, spec.SecurityContext.SeccompProfile, name)
		require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type, name)
		require.NotNil(t, spec.AutomountServiceAccountToken, name)
		require.False(t, *spec.AutomountServiceAccountToken, name)

		all := append(slices.Clone(spec.InitContainers), spec.Containers...)
		for _, c := range all {
			where := name + " container " + c.Name
			checkImage(t, where, c.Image)
			sc := c.SecurityContext
			require.NotNil(t, sc, where)
			require.NotNil(t, sc.AllowPrivilegeEscalation, where)
			require.False(t, *sc.AllowPrivilegeEscalation, where)
			require.NotNil(t, sc.ReadOnlyRootFilesystem, where)
			require.True(t, *sc.ReadOnlyRootFilesystem, where)
			require.NotNil(t, sc.Capabilities, where)
			require.Contains(t, sc.Capabilities.Drop, corev1.Capability("ALL"), where)
			require.Nil(t, sc.Privileged, where)
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				require.Contains(t, c.Resources.Requests, res, where)
				require.Contains(t, c.Resources.Limits, res, where)
				require.LessOrEqual(t, c.Resources.Requests.Name(res, "").Cmp(c.Resources.Limits[res]), 0, where)
			}
			for _, ref := range references(c) {
				checkReference(t, where, ref, secrets, configMaps, external)
			}
		}
		for _, c := range spec.Containers {
			where := name + " container " + c.Name
			require.NotNil(t, c.ReadinessProbe, where)
			require.NotNil(t, c.LivenessProbe, where)
			if !isConverge(c.Image) {
				continue
			}
			// A converge server is ready when its gRPC health says SERVING (schema current,
			// stores answer, not draining), on the port it listens on.
			listen := envValue(c, "CONVERGE_LISTEN")
			require.NotEmpty(t, listen, where)
			require.NotNil(t, c.ReadinessProbe.GRPC, where+": readiness must be the gRPC health probe")
			require.Equal(t, listen, fmt.Sprintf("0.0.0.0:%d", c.ReadinessProbe.GRPC.Port), where)
			require.True(t, slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
				return p.Name == "grpc" && p.ContainerPort == c.ReadinessProbe.GRPC.Port
			}), where)
			// The grace period covers the server's drain (2 s NOT_SERVING + up to 15 s graceful
			// stop), and for an agent its drain timeout on top.
			grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
			need := 17 * time.Second
			if strings.Contains(c.Image, "converge-agent") {
				drain, err := time.ParseDuration(configValue(c, config, "CONVERGE_AGENT_DRAIN_TIMEOUT"))
				require.NoError(t, err, where)
				need += drain
			}
			require.Greater(t, grace, need, where)
		}
	}

	for _, m := range ms {
		svc, ok := m.obj.(*corev1.Service)
		if !ok {
			continue
		}
		var matched *corev1.PodTemplateSpec
		for _, p := range pods {
			if len(svc.Spec.Selector) > 0 && subsetEqual(p.Labels, svc.Spec.Selector) {
				matched = &p
				break
			}
		}
		require.NotNil(t, matched, "Service %s selects no pod", m.name)
		for _, port := range svc.Spec.Ports {
			if port.TargetPort.StrVal == "" {
				continue
			}
			require.True(t, slices.ContainsFunc(matched.Spec.Containers, func(c corev1.Container) bool {
				return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port.TargetPort.StrVal })
			}), "Service %s: target port %s", m.name, port.TargetPort.StrVal)
		}
	}
}

// checkImage: a registry path with a tag, never latest.
func checkImage(t *testing.T, where, image string) {
	t.Helper()
	name, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
	require.True(t, ok, "%s: image %q has no tag", where, image)
	require.NotEmpty(t, name, where)
	require.NotEqual(t, "latest", tag, "%s: image %q", where, image)
	require.NotEmpty(t, tag, where)
}

type reference struct{ kind, name, key string }

// references answers the Secrets and ConfigMaps a container reads.
func references(c corev1.Container) []reference {
	var out []reference
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil {
			out = append(out, reference{"Secret", e.SecretRef.Name, ""})
		}
		if e.ConfigMapRef != nil {
			out = append(out, reference{"ConfigMap", e.ConfigMapRef.Name, ""})
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			out = append(out, reference{"Secret", r.Name, r.Key})
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			out = append(out, reference{"ConfigMap", r.Name, r.Key})
		}
	}
	return out
}

func checkReference(t *testing.T, where string, ref reference, secrets, configMaps map[string]map[string]bool, external []string) {
	t.Helper()
	objs := secrets
	if ref.kind == "ConfigMap" {
		objs = configMaps
	}
	got, ok := objs[ref.name]
	if !ok {
		require.True(t, ref.kind == "Secret" && slices.Contains(external, ref.name),
			"%s: %s %q is neither in the build nor one the operator creates", where, ref.kind, ref.name)
		return
	}
	if ref.key != "" {
		require.True(t, got[ref.key], "%s: %s %s has no key %q", where, ref.kind, ref.name, ref.key)
	}
}

func TestKubernetesNetworkPolicies(t *testing.T) {
	t.Parallel()
	ms, err := build(t, "kubernetes/overlays/dev")
	require.NoError(t, err)
	from := map[string][]string{} // policy → components allowed in
	for _, m := range ms {
		np, ok := m.obj.(*networkingv1.NetworkPolicy)
		if !ok {
			continue
		}
		require.Equal(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes, m.name)
		for _, rule := range np.Spec.Ingress {
			for _, peer := range rule.From {
				if peer.PodSelector == nil {
					continue
				}
				if c, ok := peer.PodSelector.MatchLabels["app.kubernetes.io/component"]; ok {
					from[m.name] = append(from[m.name], c)
				}
				for _, e := range peer.PodSelector.MatchExpressions {
					if e.Key == "app.kubernetes.io/component" {
						from[m.name] = append(from[m.name], e.Values...)
					}
				}
			}
		}
	}
	require.ElementsMatch(t, []string{"scheduler", "agent"}, from["converge-registry"])
	require.ElementsMatch(t, []string{"scheduler"}, from["converge-verifier"])
	// The Scheduler reads Knowledge for its dashboard's knowledge pages.
	require.ElementsMatch(t, []string{"scheduler", "agent"}, from["converge-knowledge"])
	require.ElementsMatch(t, []string{"scheduler", "registry", "knowledge", "verifier"}, from["converge-postgres"])
	require.ElementsMatch(t, []string{"registry"}, from["converge-redis"])
}

func TestKubernetesProduction(t *testing.T) {
	t.Parallel()
	ms, err := build(t, "kubernetes/overlays/production")
	require.NoError(t, err)
	replicas := map[string]int32{}
	for _, m := range ms {
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			replicas[m.name] = *o.Spec.Replicas
			require.Equal(t, "converge", o.Namespace)
		case *appsv1.StatefulSet:
			t.Errorf("production runs no StatefulSet (Postgres and Redis are external): %s", m.name)
		case *corev1.Secret:
			t.Errorf("production generates no Secret (the operator creates them): %s", m.name)
		case *policyv1.PodDisruptionBudget:
			if m.name == "converge-scheduler" {
				require.Nil(t, o.Spec.MaxUnavailable)
				require.Equal(t, int32(1), o.Spec.MinAvailable.IntVal)
			}
		case *networkingv1.Ingress:
			require.Len(t, o.Spec.TLS, 1)
			require.Equal(t, "converge-tls", o.Spec.TLS[0].SecretName)
			require.Equal(t, "converge-scheduler", o.Spec.Rules[0].HTTP.Paths[0].Backend.Service.Name)
		}
	}
	require.Equal(t, int32(2), replicas["converge-scheduler"])
	require.Greater(t, replicas["converge-agent"], int32(2))
}

// TestKubernetesStrictDecoding: a field the Kubernetes types do not have (here a misspelt probe)
// fails the build check, so the overlays above are checked field by field, not only parsed.
func TestKubernetesStrictDecoding(t *testing.T) {
	t.Parallel()
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob("kubernetes/base/*.yaml")
	require.NoError(t, err)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, fs.WriteFile("/k/base/"+filepath.Base(f), raw))
	}
	require.NoError(t, fs.WriteFile("/k/overlay/kustomization.yaml", []byte(`resources:
  - ../base
secretGenerator:
  - name: converge-secrets
    literals: [auth-tokens=a, token=a, postgres-url=postgres://x, redis-url=redis://x]
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: converge-knowledge
      spec:
        template:
          spec:
            containers:
              - name: knowledge
                readinesProbe:
                  grpc:
                    port: 7073
`)))
	_, err = buildFS(t, fs, "/k/overlay")
	require.ErrorContains(t, err, "readinesProbe")
	// The same overlay without the misspelling builds: the failure above is the field.
	raw, err := fs.ReadFile("/k/overlay/kustomization.yaml")
	require.NoError(t, err)
	require.NoError(t, fs.WriteFile("/k/overlay/kustomization.yaml", []byte(strings.ReplaceAll(string(raw), "readinesProbe", "readinessProbe"))))
	_, err = buildFS(t, fs, "/k/overlay")
	require.NoError(t, err)
}

func keys(bin map[string][]byte, str map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range bin {
		out[k] = true
	}
	for k := range str {
		out[k] = true
	}
	return out
}

func subset(labels, want map[string]string) map[string]string {
	out := map[string]string{}
	for k := range want {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func subsetEqual(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func isConverge(image string) bool {
	return strings.Contains(image[strings.LastIndex(image, "/")+1:], "converge")
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// configValue answers a variable set on the container or through its converge-config ConfigMap.
func configValue(c corev1.Container, config map[string]string, name string) string {
	if v := envValue(c, name); v != "" {
		return v
	}
	return config[name]
}
