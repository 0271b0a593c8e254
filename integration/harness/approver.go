package harness

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The controller-manager never approves kubelet-serving CSRs: a cluster whose nodes set
// serverTLSBootstrap runs an approver. The harness's checks that the request is a node's
// own, for its own name, and for serving only, then approves; anything else is denied
// with the reason.

// ApproveServingCSRs approves nodes' kubelet-serving CSRs until ctx ends, looking every
// second, and writes a line per decision to out.
func ApproveServingCSRs(ctx context.Context, c kubernetes.Interface, out io.Writer) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		list, err := c.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(out, "list CSRs: %v\n", err)
			list = &certificatesv1.CertificateSigningRequestList{}
		}
		for i := range list.Items {
			r := &list.Items[i]
			if r.Spec.SignerName != certificatesv1.KubeletServingSignerName || decided(r) {
				continue
			}
			cond := certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue,
				Reason: "UnitletHarnessApprove", Message: "a node's own serving certificate",
			}
			if why := servingRequestProblem(r); why != "" {
				cond.Type, cond.Reason, cond.Message = certificatesv1.CertificateDenied, "UnitletHarnessDeny", why
			}
			r.Status.Conditions = append(r.Status.Conditions, cond)
			if _, err := c.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, r.Name, r, metav1.UpdateOptions{}); err != nil {
				fmt.Fprintf(out, "%s CSR %s: %v\n", cond.Type, r.Name, err)
				continue
			}
			fmt.Fprintf(out, "%s %s CSR %s of %s: %s\n", time.Now().UTC().Format(time.RFC3339), cond.Type, r.Name, r.Spec.Username, cond.Message)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func decided(r *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range r.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// servingRequestProblem says why r is not a node's request for its own serving
// certificate, or "".
func servingRequestProblem(r *certificatesv1.CertificateSigningRequest) string {
	if !strings.HasPrefix(r.Spec.Username, "system:node:") || !slices.Contains(r.Spec.Groups, "system:nodes") {
		return fmt.Sprintf("requested by %q, not a node", r.Spec.Username)
	}
	block, _ := pem.Decode(r.Spec.Request)
	if block == nil {
		return "the request is not PEM"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "the request does not parse: " + err.Error()
	}
	if req.Subject.CommonName != r.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Sprintf("subject CN=%q O=%v is not the requester's", req.Subject.CommonName, req.Subject.Organization)
	}
	if len(req.DNSNames)+len(req.IPAddresses) == 0 || len(req.EmailAddresses)+len(req.URIs) > 0 {
		return "a serving certificate names DNS names or IPs, and nothing else"
	}
	for _, u := range r.Spec.Usages {
		if !slices.Contains([]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}, u) {
			return fmt.Sprintf("usage %q is not for serving", u)
		}
	}
	return ""
}
