package criconfig

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func svc(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func TestServiceLinkEnvVariables(t *testing.T) {
	services := []*corev1.Service{
		svc("shop", "foo-bar", "1.2.3.4", corev1.ServicePort{Port: 8080, Protocol: corev1.ProtocolTCP}),
		svc("shop", "multi", "10.0.0.9",
			corev1.ServicePort{Name: "http", Port: 80},
			corev1.ServicePort{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP}),
		svc("shop", "v6", "fd00::9", corev1.ServicePort{Port: 443, Protocol: corev1.ProtocolSCTP}),
	}
	names, vals := ServiceLinkEnv("shop", true, services)
	want := [][2]string{
		{"FOO_BAR_SERVICE_HOST", "1.2.3.4"},
		{"FOO_BAR_SERVICE_PORT", "8080"},
		{"FOO_BAR_PORT", "tcp://1.2.3.4:8080"},
		{"FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"},
		{"FOO_BAR_PORT_8080_TCP_PROTO", "tcp"},
		{"FOO_BAR_PORT_8080_TCP_PORT", "8080"},
		{"FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"},
		{"MULTI_SERVICE_HOST", "10.0.0.9"},
		{"MULTI_SERVICE_PORT", "80"},
		{"MULTI_SERVICE_PORT_HTTP", "80"},
		{"MULTI_SERVICE_PORT_DNS_UDP", "53"},
		{"MULTI_PORT", "tcp://10.0.0.9:80"},
		{"MULTI_PORT_80_TCP", "tcp://10.0.0.9:80"},
		{"MULTI_PORT_80_TCP_PROTO", "tcp"},
		{"MULTI_PORT_80_TCP_PORT", "80"},
		{"MULTI_PORT_80_TCP_ADDR", "10.0.0.9"},
		{"MULTI_PORT_53_UDP", "udp://10.0.0.9:53"},
		{"MULTI_PORT_53_UDP_PROTO", "udp"},
		{"MULTI_PORT_53_UDP_PORT", "53"},
		{"MULTI_PORT_53_UDP_ADDR", "10.0.0.9"},
		{"V6_SERVICE_HOST", "fd00::9"},
		{"V6_SERVICE_PORT", "443"},
		{"V6_PORT", "sctp://[fd00::9]:443"},
		{"V6_PORT_443_SCTP", "sctp://[fd00::9]:443"},
		{"V6_PORT_443_SCTP_PROTO", "sctp"},
		{"V6_PORT_443_SCTP_PORT", "443"},
		{"V6_PORT_443_SCTP_ADDR", "fd00::9"},
	}
	var got [][2]string
	for _, n := range names {
		got = append(got, [2]string{n, vals[n]})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}
}

func TestServiceLinkEnvChoosesServices(t *testing.T) {
	port := corev1.ServicePort{Port: 443}
	master := svc("default", "kubernetes", "10.96.0.1", port)
	services := []*corev1.Service{
		svc("other", "elsewhere", "10.96.0.5", port),
		svc("shop", "headless", corev1.ClusterIPNone, port),
		svc("shop", "external", "", port),
		svc("shop", "web", "10.96.0.7", port),
		master,
		svc("default", "in-default", "10.96.0.8", port),
	}
	hosts := func(ns string, enable bool, services []*corev1.Service) map[string]string {
		_, vals := ServiceLinkEnv(ns, enable, services)
		out := map[string]string{}
		for k, v := range vals {
			if strings.HasSuffix(k, "_SERVICE_HOST") {
				out[k] = v
			}
		}
		return out
	}
	tests := []struct {
		name     string
		ns       string
		enable   bool
		services []*corev1.Service
		want     map[string]string
	}{
		{"namespace's services with a cluster IP, and the master", "shop", true, services,
			map[string]string{"WEB_SERVICE_HOST": "10.96.0.7", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}},
		{"enableServiceLinks false: only the master", "shop", false, services,
			map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}},
		{"in the default namespace", "default", true, services,
			map[string]string{"IN_DEFAULT_SERVICE_HOST": "10.96.0.8", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}},
		{"default namespace, links off", "default", false, services,
			map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1"}},
		{"the namespace's own kubernetes service wins over the master, either order", "shop", true,
			[]*corev1.Service{master, svc("shop", "kubernetes", "10.96.0.99", port), master},
			map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.99"}},
		{"no services (standalone)", "shop", true, nil, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hosts(tt.ns, tt.enable, tt.services); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEnvServiceLinkPrecedence(t *testing.T) {
	pod := testPod()
	pod.Spec.EnableServiceLinks = ptrTo(true)
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}
	c.Env = []corev1.EnvVar{
		{Name: "WEB_SERVICE_PORT", Value: "mine"},
		{Name: "URL", Value: "http://$(WEB_SERVICE_HOST):$(WEB_SERVICE_PORT)"},
	}
	objs := newObjects()
	objs.configMaps["shop/cfg"] = map[string]string{"KUBERNETES_SERVICE_HOST": "from-configmap"}
	pe := PodEnv{Services: []*corev1.Service{
		svc("shop", "web", "10.96.0.7", corev1.ServicePort{Port: 80}),
		svc("default", "kubernetes", "10.96.0.1", corev1.ServicePort{Name: "https", Port: 443}),
	}}
	env, _, err := Env(context.Background(), pod, c, pe, objs)
	if err != nil {
		t.Fatal(err)
	}
	got := envOf(env)
	want := [][2]string{
		// The container's own variables first, in order, winning over the links...
		{"KUBERNETES_SERVICE_HOST", "from-configmap"},
		{"WEB_SERVICE_PORT", "mine"},
		// ...which its values may refer to.
		{"URL", "http://10.96.0.7:mine"},
		// Then the remaining links, by service name.
		{"KUBERNETES_SERVICE_PORT", "443"},
		{"KUBERNETES_SERVICE_PORT_HTTPS", "443"},
		{"KUBERNETES_PORT", "tcp://10.96.0.1:443"},
		{"KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443"},
		{"KUBERNETES_PORT_443_TCP_PROTO", "tcp"},
		{"KUBERNETES_PORT_443_TCP_PORT", "443"},
		{"KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1"},
		{"WEB_SERVICE_HOST", "10.96.0.7"},
		{"WEB_PORT", "tcp://10.96.0.7:80"},
		{"WEB_PORT_80_TCP", "tcp://10.96.0.7:80"},
		{"WEB_PORT_80_TCP_PROTO", "tcp"},
		{"WEB_PORT_80_TCP_PORT", "80"},
		{"WEB_PORT_80_TCP_ADDR", "10.96.0.7"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%v\nwant\n%v", got, want)
	}

	// Links off: only the master service's.
	pod.Spec.EnableServiceLinks = ptrTo(false)
	c.Env, c.EnvFrom = nil, nil
	env, _, err = Env(context.Background(), pod, c, pe, objs)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		if !strings.HasPrefix(kv.Key, "KUBERNETES_") {
			t.Errorf("with enableServiceLinks false, got %s", kv.Key)
		}
	}
	if len(env) != 8 {
		t.Errorf("with enableServiceLinks false, %d variables, want the master's 8", len(env))
	}
}
