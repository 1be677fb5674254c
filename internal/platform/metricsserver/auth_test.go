package metricsserver

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeAPI answers TokenReviews from tokens (token -> user) and
// SubjectAccessReviews from readers (user -> allowed), and records the
// reviews it was asked for.
type fakeAPI struct {
	*fake.Clientset

	mu        sync.Mutex
	tokens    map[string]authenticationv1.UserInfo
	readers   map[string]bool
	fail      error
	tokenAsks []string
	sars      []authorizationv1.SubjectAccessReviewSpec
}

func newFakeAPI() *fakeAPI {
	f := &fakeAPI{
		Clientset: fake.NewClientset(),
		tokens: map[string]authenticationv1.UserInfo{
			"reader-token": {Username: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}},
			"other-token": {Username: "system:serviceaccount:default:nobody", UID: "u2", Groups: []string{"system:authenticated"}},
		},
		readers: map[string]bool{"system:serviceaccount:monitoring:prometheus": true},
	}
	f.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.fail != nil {
			return true, nil, f.fail
		}
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		f.tokenAsks = append(f.tokenAsks, tr.Spec.Token)
		if u, ok := f.tokens[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	f.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.fail != nil {
			return true, nil, f.fail
		}
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.sars = append(f.sars, sar.Spec)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = f.readers[sar.Spec.User] && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return f
}

func (f *fakeAPI) asks() (tokens, sars int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tokenAsks), len(f.sars)
}

func (f *fakeAPI) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })

func serve(h http.Handler, method, path, auth string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestReviewerDecides(t *testing.T) {
	api := newFakeAPI()
	h := NewReviewer(api).Wrap(okHandler, DefaultAlwaysAllow)
	for _, tc := range []struct {
		name, method, path, auth string
		fail                     error
		wantCode                 int
		wantBody                 string
	}{
		{name: "a reader", path: "/metrics", auth: "Bearer reader-token", wantCode: 200, wantBody: "served"},
		{name: "the scheme in any case", path: "/metrics", auth: "bearer  reader-token ", wantCode: 200, wantBody: "served"},
		{name: "no token", path: "/metrics", wantCode: 401, wantBody: "Unauthorized"},
		{name: "an empty token", path: "/metrics", auth: "Bearer ", wantCode: 401, wantBody: "Unauthorized"},
		{name: "basic auth", path: "/metrics", auth: "Basic cmVhZGVyOnB3", wantCode: 401, wantBody: "Unauthorized"},
		{name: "a token the API server refuses", path: "/metrics", auth: "Bearer forged", wantCode: 401, wantBody: "Unauthorized"},
		{name: "a user who may not read", path: "/metrics", auth: "Bearer other-token", wantCode: 403,
			wantBody: `Forbidden: user "system:serviceaccount:default:nobody" may not get /metrics`},
		{name: "a reader posting", method: http.MethodPost, path: "/metrics", auth: "Bearer reader-token", wantCode: 403, wantBody: "may not post /metrics"},
		{name: "a reader, another path", path: "/debug/pprof/", auth: "Bearer reader-token", wantCode: 403, wantBody: "may not get /debug/pprof/"},
		{name: "an unknown path needs a token too", path: "/nothing", wantCode: 401},
		{name: "healthz for anyone", path: "/healthz", wantCode: 200, wantBody: "served"},
		{name: "readyz for anyone", path: "/readyz", wantCode: 200, wantBody: "served"},
		{name: "livez for anyone", path: "/livez", auth: "Bearer forged", wantCode: 200, wantBody: "served"},
		{name: "the API server fails", path: "/metrics", auth: "Bearer fresh-token", fail: errors.New("connection refused"), wantCode: 500, wantBody: "could not be reviewed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api.setFail(tc.fail)
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			rec := serve(h, method, tc.path, tc.auth)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("%s %s with %q: %d %q, want %d containing %q", method, tc.path, tc.auth, rec.Code, rec.Body, tc.wantCode, tc.wantBody)
			}
			if rec.Code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	if tokens, _ := api.asks(); tokens == 0 {
		t.Error("no TokenReview was made")
	}
	for _, tok := range api.tokenAsks {
		if tok == "" {
			t.Error("an empty token was sent for review")
		}
	}
}

// The SubjectAccessReview asks about the token's whole user, the request's
// verb and its path.
func TestReviewerAsksAboutTheUser(t *testing.T) {
	api := newFakeAPI()
	h := NewReviewer(api).Wrap(okHandler, nil)
	if rec := serve(h, http.MethodGet, "/metrics", "Bearer reader-token"); rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	want := []authorizationv1.SubjectAccessReviewSpec{{
		User: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra:                 map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}}
	if diff := cmp.Diff(want, api.sars); diff != "" {
		t.Errorf("SubjectAccessReviews (-want +got):\n%s", diff)
	}
}

// Answers are cached for their lifetimes; failures to ask are not.
func TestReviewerCaches(t *testing.T) {
	api := newFakeAPI()
	clk := testingclock.NewFakeClock(time.Now())
	h := newReviewer(api, clk).Wrap(okHandler, nil)
	step := func(auth string, wantCode, wantTokens, wantSARs int) {
		t.Helper()
		if rec := serve(h, http.MethodGet, "/metrics", auth); rec.Code != wantCode {
			t.Fatalf("%q: %d %s, want %d", auth, rec.Code, rec.Body, wantCode)
		}
		if tokens, sars := api.asks(); tokens != wantTokens || sars != wantSARs {
			t.Fatalf("%q: %d TokenReviews and %d SubjectAccessReviews so far, want %d and %d", auth, tokens, sars, wantTokens, wantSARs)
		}
	}
	step("Bearer reader-token", 200, 1, 1)
	step("Bearer reader-token", 200, 1, 1)
	clk.Step(DefaultTokenTTL + time.Second)
	// The token is reviewed again; the user's access is still known.
	step("Bearer reader-token", 200, 2, 1)
	clk.Step(DefaultAllowTTL)
	step("Bearer reader-token", 200, 3, 2)

	step("Bearer forged", 401, 4, 2)
	step("Bearer forged", 401, 4, 2)
	clk.Step(DefaultInvalidTokenTTL + time.Second)
	step("Bearer forged", 401, 5, 2)

	step("Bearer other-token", 403, 6, 3)
	step("Bearer other-token", 403, 6, 3)
	clk.Step(DefaultDenyTTL + time.Second)
	// The token's one-minute answer outlives the denial's thirty seconds.
	step("Bearer other-token", 403, 6, 4)

	// A failure is retried at the next scrape.
	api.setFail(errors.New("etcdserver: request timed out"))
	step("Bearer new-token", 500, 6, 4)
	api.setFail(nil)
	api.tokens["new-token"] = api.tokens["reader-token"]
	step("Bearer new-token", 200, 7, 4)
}

func TestUserKeyTellsUsersApart(t *testing.T) {
	base := user{name: "a", uid: "1", groups: []string{"g"}, extra: map[string]authorizationv1.ExtraValue{"k": {"v"}}}
	for name, u := range map[string]user{
		"name":   {name: "b", uid: "1", groups: []string{"g"}, extra: base.extra},
		"uid":    {name: "a", uid: "2", groups: []string{"g"}, extra: base.extra},
		"groups": {name: "a", uid: "1", groups: []string{"g", "h"}, extra: base.extra},
		"extra":  {name: "a", uid: "1", groups: []string{"g"}, extra: map[string]authorizationv1.ExtraValue{"k": {"w"}}},
		"quotes": {name: `a" "1`, groups: []string{"g"}, extra: base.extra},
	} {
		if u.key() == base.key() {
			t.Errorf("a user differing in %s has the same key %s", name, u.key())
		}
	}
	same := user{name: "a", uid: "1", groups: []string{"g"}, extra: map[string]authorizationv1.ExtraValue{"k": {"v"}}}
	if same.key() != base.key() {
		t.Errorf("equal users: %s and %s", same.key(), base.key())
	}
}
