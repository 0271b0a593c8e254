package criconfig

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// masterService is the API server's own service, in the default namespace: every
// container gets its variables, enableServiceLinks or not.
const masterService = "kubernetes"

// serviceLinks are the service-link variables (Docker-link style) of one container, in a
// stable order, with their values by name.
type serviceLinks struct {
	names []string
	vals  map[string]string
}

func (l *serviceLinks) set(name, val string) {
	if _, ok := l.vals[name]; !ok {
		l.names = append(l.names, name)
	}
	l.vals[name] = val
}

// ServiceLinkEnv is the service-link environment of a container of a pod in namespace
// ns, as the kubelet makes it from the services it knows: the master service
// (default/kubernetes) always, and with enableServiceLinks every service of ns; a
// service of ns named kubernetes takes the master's place. Services without a cluster IP
// (headless, ExternalName) give nothing. Each service gives <SVC>_SERVICE_HOST,
// <SVC>_SERVICE_PORT, <SVC>_SERVICE_PORT_<PORTNAME> per named port, <SVC>_PORT (its
// first port) and <SVC>_PORT_<port>_<PROTO>{,_PROTO,_PORT,_ADDR} per port, where <SVC>
// is the name upper-cased with '-' as '_'. The kubelet orders them by chance; here they
// come by service name, then in that order.
func ServiceLinkEnv(ns string, enableServiceLinks bool, services []*corev1.Service) (names []string, vals map[string]string) {
	l := serviceLinks{vals: map[string]string{}}
	chosen := map[string]*corev1.Service{}
	for _, s := range services {
		if !hasClusterIP(s) {
			continue
		}
		switch {
		case s.Namespace == metav1.NamespaceDefault && s.Name == masterService:
			if _, ok := chosen[s.Name]; !ok {
				chosen[s.Name] = s
			}
		case s.Namespace == ns && enableServiceLinks:
			chosen[s.Name] = s
		}
	}
	list := make([]*corev1.Service, 0, len(chosen))
	for _, s := range chosen {
		list = append(list, s)
	}
	slices.SortFunc(list, func(a, b *corev1.Service) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range list {
		l.addService(s)
	}
	return l.names, l.vals
}

func hasClusterIP(s *corev1.Service) bool {
	return s.Spec.ClusterIP != "" && s.Spec.ClusterIP != corev1.ClusterIPNone
}

func (l *serviceLinks) addService(s *corev1.Service) {
	// The API requires a port of every service with a cluster IP; one without has no
	// first port to announce.
	if len(s.Spec.Ports) == 0 {
		return
	}
	prefix := envVarName(s.Name)
	ip := s.Spec.ClusterIP
	l.set(prefix+"_SERVICE_HOST", ip)
	l.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
	for _, p := range s.Spec.Ports {
		if p.Name != "" {
			l.set(prefix+"_SERVICE_PORT_"+envVarName(p.Name), strconv.Itoa(int(p.Port)))
		}
	}
	for i, p := range s.Spec.Ports {
		proto := string(corev1.ProtocolTCP)
		if p.Protocol != "" {
			proto = string(p.Protocol)
		}
		port := strconv.Itoa(int(p.Port))
		url := strings.ToLower(proto) + "://" + net.JoinHostPort(ip, port)
		if i == 0 {
			l.set(prefix+"_PORT", url)
		}
		pp := prefix + "_PORT_" + port + "_" + strings.ToUpper(proto)
		l.set(pp, url)
		l.set(pp+"_PROTO", strings.ToLower(proto))
		l.set(pp+"_PORT", port)
		l.set(pp+"_ADDR", ip)
	}
}

// envVarName turns a service or port name into the part of a variable name it gives.
func envVarName(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}
