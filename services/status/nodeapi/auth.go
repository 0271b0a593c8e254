package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// auth is the authentication and authorization in front of every endpoint.
type auth struct {
	authn    authenticator.Request
	authz    authorizer.Authorizer
	nodeName string
	// clientCA reloads the x509 client CA file while the server runs; nil when none.
	clientCA *dynamiccertificates.DynamicFileCAContent
}

// newAuth builds the kubelet's authenticator and authorizer from its configuration. With a
// client, x509 (clientCAFile), webhook TokenReview and anonymous authenticate as configured,
// and AlwaysAllow or webhook SubjectAccessReview authorize.
//
// Without a client (standalone) nothing can be asked of the API server: as the kubelet,
// webhook authentication or authorization is refused (CheckStandalone), so the mode is
// AlwaysAllow, which lets in every caller that authenticates: anonymous callers when
// authentication.anonymous is enabled. Stricter than the kubelet, an x509 caller is
// allowed only when its user name is one of standaloneUsers, never for being signed by
// the CA alone.
func newAuth(client kubernetes.Interface, nodeName string, authn kubeletconfigv1beta1.KubeletAuthentication, authz kubeletconfigv1beta1.KubeletAuthorization, standaloneUsers []string) (*auth, error) {
	if client == nil {
		if err := CheckStandalone(authn, authz); err != nil {
			return nil, err
		}
	}
	a := &auth{nodeName: nodeName}
	anonymous := authn.Anonymous.Enabled != nil && *authn.Anonymous.Enabled
	webhookAuthn := authn.Webhook.Enabled == nil || *authn.Webhook.Enabled
	mode := authz.Mode
	if mode == "" {
		mode = kubeletconfigv1beta1.KubeletAuthorizationModeWebhook
	}

	cfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserver.AnonymousAuthConfig{Enabled: anonymous},
		CacheTTL:  authn.Webhook.CacheTTL.Duration,
	}
	if authn.X509.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", authn.X509.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("read client CA file %s: %w", authn.X509.ClientCAFile, err)
		}
		a.clientCA = ca
		cfg.ClientCertificateCAContentProvider = ca
	}
	if webhookAuthn && client != nil {
		cfg.TokenAccessReviewClient = client.AuthenticationV1()
		cfg.WebhookRetryBackoff = webhookRetryBackoff()
	}
	if !anonymous && cfg.ClientCertificateCAContentProvider == nil && cfg.TokenAccessReviewClient == nil {
		// Nothing can authenticate (a standalone node without a client CA or anonymous
		// access): every request is refused with 401.
		a.authn = authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { return nil, false, nil })
	} else {
		req, _, err := cfg.New()
		if err != nil {
			return nil, fmt.Errorf("build authenticator: %w", err)
		}
		a.authn = req
	}

	switch {
	case client == nil:
		// CheckStandalone left AlwaysAllow only.
		a.authz = standaloneAuthorizer{users: standaloneUsers}
	case mode == kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow:
		a.authz = authorizerfactory.NewAlwaysAllowAuthorizer()
	case mode == kubeletconfigv1beta1.KubeletAuthorizationModeWebhook:
		z, err := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             authz.Webhook.CacheAuthorizedTTL.Duration,
			DenyCacheTTL:              authz.Webhook.CacheUnauthorizedTTL.Duration,
			WebhookRetryBackoff:       webhookRetryBackoff(),
		}.New()
		if err != nil {
			return nil, fmt.Errorf("build webhook authorizer: %w", err)
		}
		a.authz = z
	default:
		return nil, fmt.Errorf("unknown authorization mode %q", mode)
	}
	return a, nil
}

// CheckStandalone refuses what a node without an API server cannot do, as the kubelet
// refuses to start with it: webhook authentication (TokenReview) and webhook authorization
// (SubjectAccessReview), the defaults of a KubeletConfiguration; both are named when both
// are set. A standalone node must set authentication.webhook.enabled: false and
// authorization.mode: AlwaysAllow.
func CheckStandalone(authn kubeletconfigv1beta1.KubeletAuthentication, authz kubeletconfigv1beta1.KubeletAuthorization) error {
	var errs []error
	if authn.Webhook.Enabled == nil || *authn.Webhook.Enabled {
		errs = append(errs, errors.New("authentication.webhook.enabled: true (the default) needs an API server to review tokens; a standalone node (no kubeconfig) must set it to false"))
	}
	if authz.Mode == "" || authz.Mode == kubeletconfigv1beta1.KubeletAuthorizationModeWebhook {
		errs = append(errs, fmt.Errorf("authorization.mode: %s needs an API server to review access; a standalone node (no kubeconfig) must set it to %s", kubeletconfigv1beta1.KubeletAuthorizationModeWebhook, kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow))
	}
	return errors.Join(errs...)
}

// webhookRetryBackoff is how TokenReviews and SubjectAccessReviews are retried: the
// generic API server's default for delegated authentication and authorization
// (DefaultAuthWebhookRetryBackoff of k8s.io/apiserver/pkg/server/options), which the
// kubelet uses. Not imported from there: that package brings the whole generic API server
// (etcd's client, CEL, about 480 packages more) into the binary, and their init into its
// memory, for these four numbers.
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// run keeps the client CA bundle current until ctx is done.
func (a *auth) run(ctx context.Context) {
	if a.clientCA != nil {
		a.clientCA.Run(ctx, 1)
	}
}

// subresources names the node subresources a request to path is authorized against, most
// specific first; allowing any one of them allows the request. As the v1.36 kubelet, whose
// fine-grained authorization is GA: /pods, /runningpods, /healthz and /configz are first
// checked as nodes/pods, nodes/healthz and nodes/configz and then fall back to nodes/proxy,
// so a caller granted nodes/proxy keeps the access it always had; /stats, /metrics, /logs,
// /checkpoint, /statusz and /flagz are nodes/stats, metrics, log, checkpoint, statusz and
// configz alone; anything else (/spec, which the v1.36 kubelet no longer serves, among
// them) is nodes/proxy.
func subresources(path string) []string {
	switch {
	case underPath(path, "/pods"), underPath(path, "/runningpods"):
		return []string{"pods", "proxy"}
	case underPath(path, "/healthz"):
		return []string{"healthz", "proxy"}
	case underPath(path, "/configz"):
		return []string{"configz", "proxy"}
	case underPath(path, "/stats"):
		return []string{"stats"}
	case underPath(path, "/metrics"):
		return []string{"metrics"}
	case underPath(path, "/logs"):
		return []string{"log"}
	case underPath(path, "/checkpoint"):
		return []string{"checkpoint"}
	case underPath(path, "/statusz"):
		return []string{"statusz"}
	case underPath(path, "/flagz"):
		return []string{"configz"}
	}
	return []string{"proxy"}
}

// underPath reports whether path is root or below it.
func underPath(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}

// verb maps an HTTP method to the API verb it is authorized as.
func verb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// executes reports whether path runs code in a container or opens a way into one
// (exec, attach, portForward, run).
func executes(path string) bool {
	for _, root := range []string{"/exec", "/attach", "/portForward", "/run"} {
		if underPath(path, root) {
			return true
		}
	}
	return false
}

// requestVerb is the verb a request is authorized as. Stricter than the kubelet: exec,
// attach, portForward and run are "create" whatever the method, since a WebSocket upgrade
// is a GET, and "get nodes/proxy", which monitoring roles hold, must not mean running
// code in every pod of the node.
func requestVerb(r *http.Request) string {
	if executes(r.URL.Path) {
		return "create"
	}
	return verb(r.Method)
}

// attributes are what a request by u is authorized as: one record per subresource.
func (a *auth) attributes(u user.Info, r *http.Request) []authorizer.AttributesRecord {
	subs := subresources(r.URL.Path)
	attrs := make([]authorizer.AttributesRecord, 0, len(subs))
	for _, sub := range subs {
		attrs = append(attrs, authorizer.AttributesRecord{
			User:            u,
			Verb:            requestVerb(r),
			APIGroup:        "",
			APIVersion:      "v1",
			Resource:        "nodes",
			Subresource:     sub,
			Name:            a.nodeName,
			ResourceRequest: true,
			Path:            r.URL.Path,
		})
	}
	return attrs
}

// filter authenticates and authorizes each request before next serves it: 401 when the
// caller is not authenticated, 403 naming the user and subresources when not allowed.
func (a *auth) filter(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil {
			log.Info("authenticate request", "path", r.URL.Path, "err", err)
		}
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := a.attributes(resp.User, r)
		subs := make([]string, 0, len(attrs))
		for _, attr := range attrs {
			subs = append(subs, attr.Subresource)
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				log.Error("authorize request", "user", resp.User.GetName(), "verb", attr.Verb, "subresource", attr.Subresource, "err", err)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s)", resp.User.GetName(), attr.Verb, attr.Subresource), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		log.Debug("forbidden", "user", resp.User.GetName(), "verb", requestVerb(r), "subresources", subs, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%v)", resp.User.GetName(), requestVerb(r), subs), http.StatusForbidden)
	})
}

// standaloneAuthorizer is a standalone node's authorization mode AlwaysAllow (see newAuth):
// anonymous callers (let in only with authentication.anonymous.enabled) may do anything,
// as on the kubelet; an authenticated (x509) caller only when users names it.
type standaloneAuthorizer struct {
	users []string // x509 user names allowed everything
}

func (z standaloneAuthorizer) Authorize(_ context.Context, attr authorizer.Attributes) (authorizer.Decision, string, error) {
	u := attr.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", errors.New("request has no user")
	}
	if slices.Contains(u.GetGroups(), user.AllUnauthenticated) || slices.Contains(z.users, u.GetName()) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionDeny, "standalone: " + u.GetName() + " is not among the node API's users (UNITLET_NODE_API_USERS)", nil
}
