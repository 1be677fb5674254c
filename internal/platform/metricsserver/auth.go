package metricsserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ReviewClient creates TokenReviews and SubjectAccessReviews; a
// kubernetes.Interface is one. Its identity needs both (the built-in
// ClusterRole system:auth-delegator).
type ReviewClient interface {
	AuthenticationV1() authenticationv1client.AuthenticationV1Interface
	AuthorizationV1() authorizationv1client.AuthorizationV1Interface
}

// How long answers are cached: the values controller-runtime's metrics
// filter gives k8s.io/apiserver's delegating authenticator and authorizer,
// and their failure TTL for tokens. A scraper every 30 s then costs each
// server about one TokenReview a minute and one SubjectAccessReview every
// five; a revoked token or a removed binding stops working within a minute
// or five.
const (
	DefaultTokenTTL        = time.Minute
	DefaultInvalidTokenTTL = 10 * time.Second
	DefaultAllowTTL        = 5 * time.Minute
	DefaultDenyTTL         = 30 * time.Second
	// reviewTimeout bounds one review; the scrape waits for it.
	reviewTimeout = 10 * time.Second
	// cacheSize bounds each cache: scrapers are few, tokens rotate hourly.
	cacheSize = 1024
)

// DefaultAlwaysAllow are paths served to anyone: the kubelet's probes carry
// no token.
var DefaultAlwaysAllow = []string{"/healthz", "/readyz", "/livez"}

// Reviewer lets a request through when its bearer token is one the API
// server authenticates (TokenReview) and the token's user may use the
// request's verb on its path (SubjectAccessReview on a non-resource URL,
// as `nonResourceURLs: [/metrics], verbs: [get]` grants), the way
// Kubernetes' own components guard their /metrics. Answers are cached;
// failures to ask are not.
type Reviewer struct {
	client ReviewClient
	// tokens maps a token's SHA-256 to the user it authenticates, or to
	// nil when the API server refused it.
	tokens *cache.LRUExpireCache
	// decisions maps a user, verb and path to whether it is allowed.
	decisions *cache.LRUExpireCache

	tokenTTL, invalidTokenTTL, allowTTL, denyTTL time.Duration
}

// NewReviewer returns a Reviewer that asks through client with the default
// cache lifetimes.
func NewReviewer(client ReviewClient) *Reviewer {
	return newReviewer(client, clock.RealClock{})
}

func newReviewer(client ReviewClient, clk clock.Clock) *Reviewer {
	return &Reviewer{
		client:          client,
		tokens:          cache.NewLRUExpireCacheWithClock(cacheSize, clk),
		decisions:       cache.NewLRUExpireCacheWithClock(cacheSize, clk),
		tokenTTL:        DefaultTokenTTL,
		invalidTokenTTL: DefaultInvalidTokenTTL,
		allowTTL:        DefaultAllowTTL,
		denyTTL:         DefaultDenyTTL,
	}
}

// user is who a token authenticates, as the TokenReview said.
type user struct {
	name   string
	uid    string
	groups []string
	extra  map[string]authorizationv1.ExtraValue
}

// key identifies the user in the decision cache: everything a
// SubjectAccessReview is asked about.
func (u *user) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q", u.name, u.uid, u.groups)
	keys := make([]string, 0, len(u.extra))
	for k := range u.extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %q=%q", k, []string(u.extra[k]))
	}
	return b.String()
}

// Wrap guards next: requests for the paths in alwaysAllow go through,
// every other one needs a token that may use its verb on its path.
// Unauthenticated requests get 401, unauthorized ones 403, and a review
// that could not be made 500 (logged with the cause).
func (r *Reviewer) Wrap(next http.Handler, alwaysAllow []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if slices.Contains(alwaysAllow, req.URL.Path) {
			next.ServeHTTP(w, req)
			return
		}
		log := klog.FromContext(req.Context())
		token, ok := bearerToken(req)
		if !ok {
			unauthorized(w)
			return
		}
		u, err := r.authenticate(req.Context(), token)
		if err != nil {
			log.Error(err, "Reviewing a metrics client's token", "path", req.URL.Path, "remote", req.RemoteAddr)
			http.Error(w, "Internal Server Error: the token could not be reviewed", http.StatusInternalServerError)
			return
		}
		if u == nil {
			log.V(4).Info("Refused a token the API server does not authenticate", "path", req.URL.Path, "remote", req.RemoteAddr)
			unauthorized(w)
			return
		}
		verb := strings.ToLower(req.Method)
		allowed, err := r.authorize(req.Context(), u, verb, req.URL.Path)
		if err != nil {
			log.Error(err, "Reviewing a metrics client's access", "user", u.name, "verb", verb, "path", req.URL.Path)
			http.Error(w, "Internal Server Error: the access could not be reviewed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.V(4).Info("Refused a metrics client", "user", u.name, "verb", verb, "path", req.URL.Path)
			http.Error(w, fmt.Sprintf("Forbidden: user %q may not %s %s", u.name, verb, req.URL.Path), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="migflex metrics"`)
	http.Error(w, "Unauthorized: send a bearer token the Kubernetes API server accepts", http.StatusUnauthorized)
}

// bearerToken is the request's "Authorization: Bearer" token.
func bearerToken(req *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(req.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns the token's user, nil when the API server does not
// authenticate it.
func (r *Reviewer) authenticate(ctx context.Context, token string) (*user, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := r.tokens.Get(key); ok {
		return v.(*user), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	tr, err := r.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating a TokenReview (does this ServiceAccount have system:auth-delegator?): %w", err)
	}
	if !tr.Status.Authenticated {
		r.tokens.Add(key, (*user)(nil), r.invalidTokenTTL)
		return nil, nil
	}
	ui := tr.Status.User
	u := &user{name: ui.Username, uid: ui.UID, groups: slices.Clone(ui.Groups)}
	if len(ui.Extra) > 0 {
		u.extra = map[string]authorizationv1.ExtraValue{}
		for k, v := range ui.Extra {
			u.extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	r.tokens.Add(key, u, r.tokenTTL)
	return u, nil
}

// authorize says whether u may use verb on the non-resource path.
func (r *Reviewer) authorize(ctx context.Context, u *user, verb, path string) (bool, error) {
	key := fmt.Sprintf("%s %q %q", u.key(), verb, path)
	if v, ok := r.decisions.Get(key); ok {
		return v.(bool), nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	sar, err := r.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:                  u.name,
			UID:                   u.uid,
			Groups:                u.groups,
			Extra:                 u.extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("creating a SubjectAccessReview (does this ServiceAccount have system:auth-delegator?): %w", err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := r.denyTTL
	if allowed {
		ttl = r.allowTTL
	}
	r.decisions.Add(key, allowed, ttl)
	return allowed, nil
}
