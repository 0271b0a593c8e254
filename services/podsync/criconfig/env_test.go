package criconfig

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type fakeObjects struct {
	configMaps map[string]map[string]string
	secrets    map[string]map[string][]byte
	calls      int
	err        error
}

func (f *fakeObjects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	d, ok := f.configMaps[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	return &corev1.ConfigMap{Data: d}, nil
}

func (f *fakeObjects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	d, ok := f.secrets[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
	}
	return &corev1.Secret{Data: d}, nil
}

func newObjects() *fakeObjects {
	return &fakeObjects{
		configMaps: map[string]map[string]string{
			"shop/cfg": {"MODE": "prod", "LEVEL": "3", "bad=name": "x", "dotted.name": "ok"},
		},
		secrets: map[string]map[string][]byte{
			"shop/creds": {"PASSWORD": []byte("s3cret"), "USER": []byte("admin")},
		},
	}
}

func envOf(kvs []*runtimeapi.KeyValue) [][2]string {
	var out [][2]string
	for _, kv := range kvs {
		out = append(out, [2]string{kv.Key, string(kv.Value)})
	}
	return out
}

func TestEnv(t *testing.T) {
	pe := PodEnv{
		PodIP: "10.1.0.9", PodIPs: []string{"10.1.0.7", "fd00::7"},
		HostIPs:     []string{"192.168.1.5", "fd00::5"},
		Allocatable: rl("cpu", "4", "memory", "8Gi", "ephemeral-storage", "100Gi"),
	}
	cmRef := func(name, key string, opt bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &opt}}
	}
	secRef := func(name, key string, opt bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: &opt}}
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	res := func(container, name, divisor string) *corev1.EnvVarSource {
		s := &corev1.ResourceFieldSelector{ContainerName: container, Resource: name}
		if divisor != "" {
			s.Divisor = resource.MustParse(divisor)
		}
		return &corev1.EnvVarSource{ResourceFieldRef: s}
	}

	tests := []struct {
		name        string
		env         []corev1.EnvVar
		envFrom     []corev1.EnvFromSource
		res         corev1.ResourceRequirements
		want        [][2]string
		wantSkipped []string
		wantErr     string
	}{
		{name: "plain values", env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "EMPTY"}},
			want: [][2]string{{"A", "1"}, {"EMPTY", ""}}},
		{name: "expansion of earlier vars only", env: []corev1.EnvVar{
			{Name: "A", Value: "x"}, {Name: "B", Value: "$(A)-$(C)"}, {Name: "C", Value: "c"}, {Name: "D", Value: "$$(A) $(A)"},
		}, want: [][2]string{{"A", "x"}, {"B", "x-$(C)"}, {"C", "c"}, {"D", "$(A) x"}}},
		{name: "later env overrides and keeps first position", env: []corev1.EnvVar{
			{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "A", Value: "$(A)$(B)"},
		}, want: [][2]string{{"A", "12"}, {"B", "2"}}},
		{name: "field refs", env: []corev1.EnvVar{
			{Name: "NAME", ValueFrom: field("metadata.name")},
			{Name: "NS", ValueFrom: field("metadata.namespace")},
			{Name: "UID", ValueFrom: field("metadata.uid")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
			{Name: "NOTE", ValueFrom: field("metadata.annotations['note']")},
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
			{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
			{Name: "HOST_IPS", ValueFrom: field("status.hostIPs")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
			{Name: "LABELS", ValueFrom: field("metadata.labels")},
		}, want: [][2]string{
			{"NAME", "web"}, {"NS", "shop"}, {"UID", "1f2e3d4c-0000-1111-2222-333344445555"}, {"APP", "web"}, {"NOTE", "hi"},
			{"NODE", "node-1"}, {"SA", "default"}, {"HOST_IP", "192.168.1.5"}, {"HOST_IPS", "192.168.1.5,fd00::5"},
			{"POD_IP", "10.1.0.7"}, {"POD_IPS", "10.1.0.7,fd00::7"}, {"LABELS", `app="web"`},
		}},
		{name: "bad field path", env: []corev1.EnvVar{{Name: "X", ValueFrom: field("spec.bogus")}}, wantErr: "env X: fieldRef spec.bogus"},
		{name: "resource refs", res: corev1.ResourceRequirements{Requests: rl("cpu", "250m", "memory", "64Mi"), Limits: rl("cpu", "1500m")},
			env: []corev1.EnvVar{
				{Name: "REQ_CPU", ValueFrom: res("", "requests.cpu", "")},
				{Name: "REQ_CPU_M", ValueFrom: res("", "requests.cpu", "1m")},
				{Name: "LIM_CPU", ValueFrom: res("", "limits.cpu", "")},
				{Name: "REQ_MEM_MI", ValueFrom: res("app", "requests.memory", "1Mi")},
				{Name: "LIM_MEM", ValueFrom: res("", "limits.memory", "1Gi")},
				{Name: "LIM_EPH", ValueFrom: res("", "limits.ephemeral-storage", "1Gi")},
				{Name: "OTHER_LIM_CPU", ValueFrom: res("side", "limits.cpu", "1m")},
			}, want: [][2]string{
				{"REQ_CPU", "1"}, {"REQ_CPU_M", "250"}, {"LIM_CPU", "2"}, {"REQ_MEM_MI", "64"},
				{"LIM_MEM", "8"}, {"LIM_EPH", "100"}, {"OTHER_LIM_CPU", "4000"},
			}},
		{name: "resource ref to unknown container", env: []corev1.EnvVar{{Name: "X", ValueFrom: res("nope", "limits.cpu", "")}},
			wantErr: `no container "nope"`},
		{name: "configmap and secret keys", env: []corev1.EnvVar{
			{Name: "MODE", ValueFrom: cmRef("cfg", "MODE", false)},
			{Name: "PW", ValueFrom: secRef("creds", "PASSWORD", false)},
			{Name: "OPT_MISSING_KEY", ValueFrom: cmRef("cfg", "NOPE", true)},
			{Name: "OPT_MISSING_CM", ValueFrom: cmRef("gone", "X", true)},
			{Name: "OPT_MISSING_SECRET", ValueFrom: secRef("gone", "X", true)},
			{Name: "URL", Value: "db://$(PW)@host/$(MODE)"},
		}, want: [][2]string{{"MODE", "prod"}, {"PW", "s3cret"}, {"URL", "db://s3cret@host/prod"}}},
		{name: "required configmap missing", env: []corev1.EnvVar{{Name: "X", ValueFrom: cmRef("gone", "X", false)}},
			wantErr: "get configmap shop/gone"},
		{name: "required key missing", env: []corev1.EnvVar{{Name: "X", ValueFrom: secRef("creds", "NOPE", false)}},
			wantErr: `secret shop/creds: no key "NOPE"`},
		{name: "envFrom with prefix, invalid names skipped, env overrides",
			envFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}},
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Optional: ptrTo(true)}},
			},
			env: []corev1.EnvVar{{Name: "MODE", Value: "dev-$(LEVEL)"}},
			want: [][2]string{
				{"LEVEL", "3"}, {"MODE", "dev-3"}, {"dotted.name", "ok"}, {"DB_PASSWORD", "s3cret"}, {"DB_USER", "admin"},
			},
			wantSkipped: []string{"bad=name"}},
		{name: "envFrom values are not expanded",
			envFrom:     []corev1.EnvFromSource{{Prefix: "$(X)", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			want:        [][2]string{{"$(X)LEVEL", "3"}, {"$(X)MODE", "prod"}, {"$(X)dotted.name", "ok"}},
			wantSkipped: []string{"$(X)bad=name"}},
		{name: "envFrom required configmap missing",
			envFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}}}},
			wantErr: "envFrom[0]: get configmap shop/gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "side", Image: "x"})
			c := &pod.Spec.Containers[0]
			c.Env, c.EnvFrom, c.Resources = tt.env, tt.envFrom, tt.res
			env, skipped, err := Env(context.Background(), pod, c, pe, newObjects())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "container app: ") {
					t.Errorf("err %q does not name the container", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := envOf(env); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("env =\n %v\nwant\n %v", got, tt.want)
			}
			if !reflect.DeepEqual(skipped, tt.wantSkipped) {
				t.Errorf("skipped = %v, want %v", skipped, tt.wantSkipped)
			}
		})
	}
}

func TestEnvFetchesEachObjectOnce(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	ref := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: key}}
	}
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	c.Env = []corev1.EnvVar{{Name: "A", ValueFrom: ref("MODE")}, {Name: "B", ValueFrom: ref("LEVEL")}}
	objs := newObjects()
	if _, _, err := Env(context.Background(), pod, c, PodEnv{}, objs); err != nil {
		t.Fatal(err)
	}
	if objs.calls != 1 {
		t.Errorf("%d fetches, want 1", objs.calls)
	}
}

func TestEnvObjectErrorsAreNotOptional(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "MODE", Optional: ptrTo(true)}}}}
	boom := errors.New("apiserver unreachable")
	_, _, err := Env(context.Background(), pod, c, PodEnv{}, &fakeObjects{err: boom})
	if !errors.Is(err, boom) {
		t.Errorf("err = %v, want it to wrap %v", err, boom)
	}
}
