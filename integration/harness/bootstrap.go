package harness

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tokenChars are the characters of a bootstrap token.
const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

// bootstrapToken returns the stack's bootstrap token "<id>.<secret>", made once.
func (h *Harness) bootstrapToken() (string, error) {
	path := filepath.Join(h.paths.pki, "bootstrap-token")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	token := randomString(6) + "." + randomString(16)
	return token, os.WriteFile(path, []byte(token+"\n"), 0o600)
}

func randomString(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = tokenChars[int(b[i])%len(tokenChars)]
	}
	return string(b)
}

// setUpBootstrap makes TLS bootstrapping usable: the token's Secret, and the bindings that
// let bootstrappers create node CSRs and have them, and nodes' renewals, approved.
func (h *Harness) setUpBootstrap(ctx context.Context, c kubernetes.Interface) error {
	token, err := h.bootstrapToken()
	if err != nil {
		return err
	}
	id, secret, _ := strings.Cut(token, ".")
	objects := []func() error{
		func() error {
			_, err := c.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
				Type:       corev1.SecretTypeBootstrapToken,
				StringData: map[string]string{
					"token-id": id, "token-secret": secret, "description": "unitlet-harness node bootstrap",
					"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
				},
			}, metav1.CreateOptions{})
			return err
		},
	}
	bindings := []struct{ name, role, kind, subject string }{
		{"unitlet:node-bootstrapper", "system:node-bootstrapper", rbacv1.GroupKind, "system:bootstrappers"},
		{"unitlet:auto-approve-node-client", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", rbacv1.GroupKind, "system:bootstrappers"},
		{"unitlet:auto-approve-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", rbacv1.GroupKind, "system:nodes"},
	}
	for _, b := range bindings {
		objects = append(objects, func() error {
			_, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: b.name},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: b.kind, Name: b.subject}},
			}, metav1.CreateOptions{})
			return err
		})
	}
	for _, create := range objects {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("set up TLS bootstrapping: %w", err)
		}
	}
	return writeKubeconfig(h.BootstrapKubeconfig(), h.APIServerURL(), filepath.Join(h.paths.pki, "ca.crt"),
		"kubelet-bootstrap", "", "", token)
}
