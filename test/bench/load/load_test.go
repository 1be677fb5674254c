package load

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestCompute(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted on purpose
	}
	for name, tc := range map[string]struct {
		in   []time.Duration
		want Percentiles
	}{
		"empty": {nil, Percentiles{}},
		"one":   {ms(7), Percentiles{Count: 1, Mean: 7e6, P50: 7e6, P90: 7e6, P99: 7e6, Max: 7e6}},
		"1..100": {ms(hundred...), Percentiles{Count: 100, Mean: 50500 * time.Microsecond,
			P50: 50e6, P90: 90e6, P99: 99e6, Max: 100e6}},
		// Nearest rank: p50 of 4 samples is the 2nd, p90 and p99 the 4th.
		"four": {ms(4, 1, 3, 2), Percentiles{Count: 4, Mean: 2500 * time.Microsecond, P50: 2e6, P90: 4e6, P99: 4e6, Max: 4e6}},
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Compute(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// fakeWebhook answers like the real one: a pod named "deny-*" is denied,
// "patch-*" gets a patch, "fail-*" a 500, "uid-*" an answer for another
// uid; anything else is allowed unchanged.
func fakeWebhook(t *testing.T, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		switch {
		case strings.HasPrefix(pod.Name, "deny-"):
			resp.Allowed = false
		case strings.HasPrefix(pod.Name, "patch-"):
			resp.Patch = []byte(`[]`)
		case strings.HasPrefix(pod.Name, "fail-"):
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		case strings.HasPrefix(pod.Name, "uid-"):
			resp.UID = "someone-else"
		}
		review.Request, review.Response = nil, resp
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func wantAllowed(allowed bool) func(*admissionv1.AdmissionResponse) error {
	return func(r *admissionv1.AdmissionResponse) error {
		if r.Allowed != allowed {
			return errors.New("wrong answer")
		}
		return nil
	}
}

func TestRun(t *testing.T) {
	var hits atomic.Int64
	srv := fakeWebhook(t, &hits)
	client, err := NewClient(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []Request
	for _, tc := range []struct {
		pod   string
		check func(*admissionv1.AdmissionResponse) error
	}{
		{"ok-1", wantAllowed(true)},
		{"deny-1", wantAllowed(false)},
		{"patch-1", nil},
		{"fail-1", nil},
		{"uid-1", nil},
		{"deny-2", wantAllowed(true)}, // a wrong expectation fails the request
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.pod, Namespace: "default"}}
		r, err := NewRequest(tc.pod, pod, tc.check)
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	res, err := Run(context.Background(), Options{URL: srv.URL + "/mutate", Client: client, Concurrency: 4, Requests: 60, Warmup: 7}, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if got := hits.Load(); got != 67 {
		t.Errorf("server saw %d requests, want 67 (7 warm-up + 60)", got)
	}
	if res.Requests != 60 || res.Failures != 30 {
		t.Errorf("requests %d failures %d, want 60 and 30 (fail, uid, wrong expectation: 3 of 6 kinds)", res.Requests, res.Failures)
	}
	if res.NoAnswer != 10 || res.Wrong != 20 {
		t.Errorf("no answer %d, wrong %d; want 10 (the 500s) and 20 (uid, wrong expectation)", res.NoAnswer, res.Wrong)
	}
	if len(res.Failed) != maxFailures {
		t.Errorf("%d failure messages kept, want %d", len(res.Failed), maxFailures)
	}
	for _, want := range []string{"status 500", `answer for uid "someone-else"`, "wrong answer"} {
		if !strings.Contains(strings.Join(res.Failed, "\n"), want) {
			t.Errorf("failures %q do not mention %q", res.Failed, want)
		}
	}
	if res.Latency.Count != 60 || res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.Throughput <= 0 {
		t.Errorf("implausible measurements %+v, throughput %v", res.Latency, res.Throughput)
	}
	for _, r := range reqs {
		if got := res.ByName[r.Name].Count; got != 10 {
			t.Errorf("%s: %d samples, want 10", r.Name, got)
		}
	}
}

func TestRunRefusesNothingToDo(t *testing.T) {
	r := Request{Name: "x", UID: types.UID("x")}
	for name, o := range map[string]Options{
		"no client":      {Concurrency: 1, Requests: 1},
		"no concurrency": {Client: http.DefaultClient, Requests: 1},
		"no requests":    {Client: http.DefaultClient, Concurrency: 1},
	} {
		if _, err := Run(context.Background(), o, []Request{r}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := Run(context.Background(), Options{Client: http.DefaultClient, Concurrency: 1, Requests: 1}, nil); err == nil {
		t.Error("no requests to send: no error")
	}
}

func TestRunCancelled(t *testing.T) {
	var hits atomic.Int64
	srv := fakeWebhook(t, &hits)
	client, err := NewClient(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRequest("ok", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Options{URL: srv.URL, Client: client, Concurrency: 2, Requests: 10}, []Request{r}); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want %v", err, context.Canceled)
	}
}

func TestNewClientRejectsGarbage(t *testing.T) {
	if _, err := NewClient([]byte("not a certificate")); err == nil {
		t.Error("no error")
	}
}
