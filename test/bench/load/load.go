// Package load sends AdmissionReviews to a webhook over HTTPS at a fixed
// concurrency for a fixed number of requests, checks every answer, and
// reports throughput and exact latency percentiles from every sample.
package load

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// requestTimeout is hang protection: the API server gives up on a webhook
// after at most 30 seconds.
const requestTimeout = 60 * time.Second

// maxFailures is how many failure messages a Result keeps.
const maxFailures = 5

// NewClient is an HTTPS client trusting caPEM, speaking HTTP/2 as the API
// server's webhook client does (all requests multiplexed on one connection).
func NewClient(caPEM []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("load client: no certificate in the CA PEM")
	}
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		},
	}, nil
}

// Request is one AdmissionReview to send, encoded once, and the check its
// answer must pass.
type Request struct {
	Name string
	UID  types.UID
	Body []byte
	// Check judges the response; an error counts the request as failed.
	Check func(*admissionv1.AdmissionResponse) error
}

// NewRequest encodes a pod CREATE review for pod.
func NewRequest(name string, pod *corev1.Pod, check func(*admissionv1.AdmissionResponse) error) (Request, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return Request{}, fmt.Errorf("encoding pod %s: %w", name, err)
	}
	uid := types.UID("bench-" + name)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       uid,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: pod.Namespace,
			Name:      pod.Name,
			Operation: admissionv1.Create,
			UserInfo:  authUser,
			Object:    runtime.RawExtension{Raw: raw},
			DryRun:    new(bool),
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return Request{}, fmt.Errorf("encoding review %s: %w", name, err)
	}
	return Request{Name: name, UID: uid, Body: body, Check: check}, nil
}

// authUser is who the API server says created the pod: a controller, as for
// most pods.
var authUser = authenticationv1.UserInfo{
	Username: "system:serviceaccount:kube-system:job-controller",
	Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
}

// Options configure a run.
type Options struct {
	// URL is the webhook's /mutate URL.
	URL    string
	Client *http.Client
	// Concurrency is the number of requests in flight at any time.
	Concurrency int
	// Requests is the number of measured requests.
	Requests int
	// Warmup requests are sent first, at the same concurrency, and not
	// recorded: connection set-up, the server's first allocations.
	Warmup int
}

// Result is a run's measurements.
type Result struct {
	Requests int `json:"requests"`
	// Failures counts requests without a valid, correct answer: NoAnswer
	// (a transport error, a timeout, a status other than 200) plus Wrong
	// (an answer that failed its check). Failed holds the first few reasons.
	Failures int      `json:"failures"`
	NoAnswer int      `json:"noAnswer"`
	Wrong    int      `json:"wrong"`
	Failed   []string `json:"failed,omitempty"`
	// Elapsed is from the first measured request to the last answer.
	Elapsed    time.Duration `json:"elapsedNs"`
	Throughput float64       `json:"throughputPerSecond"`
	Latency    Percentiles   `json:"latency"`
	// ByName is the latency of each kind of request.
	ByName map[string]Percentiles `json:"byName"`
}

// Run sends o.Warmup then o.Requests requests, request i being reqs[i %
// len(reqs)], with o.Concurrency in flight. It returns an error only when
// it cannot run; failed requests are counted in the Result.
func Run(ctx context.Context, o Options, reqs []Request) (Result, error) {
	if len(reqs) == 0 || o.Concurrency < 1 || o.Requests < 1 || o.Client == nil {
		return Result{}, fmt.Errorf("load: need requests (%d), concurrency (%d), a request count (%d) and a client", len(reqs), o.Concurrency, o.Requests)
	}
	if o.Warmup > 0 {
		if _, _, err := send(ctx, o, reqs, o.Warmup); err != nil {
			return Result{}, err
		}
	}
	samples, elapsed, err := send(ctx, o, reqs, o.Requests)
	if err != nil {
		return Result{}, err
	}
	res := Result{Requests: o.Requests, Elapsed: elapsed, ByName: map[string]Percentiles{}}
	res.Throughput = float64(o.Requests) / elapsed.Seconds()
	all := make([]time.Duration, len(samples))
	byName := map[string][]time.Duration{}
	for i, s := range samples {
		all[i] = s.latency
		name := reqs[i%len(reqs)].Name
		byName[name] = append(byName[name], s.latency)
		if s.err != nil {
			res.Failures++
			if s.wrong {
				res.Wrong++
			} else {
				res.NoAnswer++
			}
			if len(res.Failed) < maxFailures {
				res.Failed = append(res.Failed, fmt.Sprintf("request %d (%s): %v", i, name, s.err))
			}
		}
	}
	res.Latency = Compute(all)
	for name, l := range byName {
		res.ByName[name] = Compute(l)
	}
	return res, nil
}

type sample struct {
	latency time.Duration
	err     error
	// wrong: an answer came and failed its check.
	wrong bool
}

func send(ctx context.Context, o Options, reqs []Request, n int) ([]sample, time.Duration, error) {
	samples := make([]sample, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(o.Concurrency, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				samples[i] = do(ctx, o, reqs[i%len(reqs)])
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("load: %w", err)
	}
	return samples, elapsed, nil
}

// do sends one request. The latency is until the whole body is read;
// decoding and checking the answer are not in it.
func do(ctx context.Context, o Options, r Request) sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL, bytes.NewReader(r.Body))
	if err != nil {
		return sample{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := o.Client.Do(req)
	if err != nil {
		return sample{latency: time.Since(start), err: err}
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	s := sample{latency: time.Since(start)}
	switch {
	case err != nil:
		s.err = fmt.Errorf("reading the answer: %w", err)
	case resp.StatusCode != http.StatusOK:
		s.err = fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	default:
		s.err = check(r, body)
		s.wrong = s.err != nil
	}
	return s
}

func check(r Request, body []byte) error {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	if review.Response == nil {
		return errors.New("answer without a response")
	}
	if review.Response.UID != r.UID {
		return fmt.Errorf("answer for uid %q, sent %q", review.Response.UID, r.UID)
	}
	if r.Check != nil {
		return r.Check(review.Response)
	}
	return nil
}

// Percentiles summarise latency samples.
type Percentiles struct {
	Count int           `json:"count"`
	Mean  time.Duration `json:"meanNs"`
	P50   time.Duration `json:"p50Ns"`
	P90   time.Duration `json:"p90Ns"`
	P99   time.Duration `json:"p99Ns"`
	Max   time.Duration `json:"maxNs"`
}

// Compute returns exact nearest-rank percentiles of samples (the smallest
// sample with at least p % of the samples at or below it).
func Compute(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	rank := func(p int) time.Duration {
		// ceil(p/100 * n) in integers, 1-based.
		k := (p*len(s) + 99) / 100
		return s[max(k, 1)-1]
	}
	return Percentiles{
		Count: len(s),
		Mean:  sum / time.Duration(len(s)),
		P50:   rank(50),
		P90:   rank(90),
		P99:   rank(99),
		Max:   s[len(s)-1],
	}
}
