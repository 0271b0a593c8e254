package criconfig

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPod is a one-container pod with API defaults, as pods reach podsync.
func testPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "web",
			Namespace:   "shop",
			UID:         "1f2e3d4c-0000-1111-2222-333344445555",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "hi"},
		},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: "default",
			DNSPolicy:          corev1.DNSClusterFirst,
			SecurityContext:    &corev1.PodSecurityContext{},
			Containers: []corev1.Container{{
				Name:                     "app",
				Image:                    "busybox:1.36",
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func rl(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i+1 < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}
