package check

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

// maxRedirects is how many redirects follow_redirects follows.
const maxRedirects = 10

// runHTTP sends an http check's request, retrying while the server does not accept connections,
// and judges the response, whatever its status.
func runHTTP(ctx context.Context, t *Target, o *Options, hc *verifierv1.HttpCheck) outcome {
	url := hc.GetUrl()
	if url == "" {
		url = strings.TrimSuffix(t.BaseURL, "/") + hc.GetPath()
	}
	method := hc.GetMethod()
	if method == "" {
		method = http.MethodGet
	}
	header := http.Header{}
	for k, v := range hc.GetHeaders() {
		header.Set(k, v)
	}
	var missing []string
	for name, variable := range hc.GetHeaderEnv() {
		v, ok := o.lookupEnv(variable)
		if !ok {
			missing = append(missing, variable)
			continue
		}
		header.Set(name, v)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return blocked(verifierv1.BlockReason_BLOCK_REASON_CREDENTIAL_MISSING, 0,
			"environment variable %s is not set on the verifier (header_env)", strings.Join(missing, ", "))
	}

	timeout := o.timeout(hc.GetTimeout())
	transport := &http.Transport{
		Proxy:             nil,                                                    // the app under test is reached directly, never through a proxy
		DialContext:       o.dialContext(timeout),                                 // the destination policy, on every dial (redirects too)
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: hc.GetTlsSkipVerify()}, //nolint:gosec // asked for by the check
		DisableKeepAlives: true,
		ForceAttemptHTTP2: true,
	}
	defer transport.CloseIdleConnections()
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if !hc.GetFollowRedirects() {
				return http.ErrUseLastResponse
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			return nil
		},
	}

	first := time.Now()
	var lastErr error
	for attempt := int32(1); ; attempt++ {
		o.attempt(attempt)
		out, connErr := httpAttempt(ctx, client, o, hc, method, url, header, timeout)
		if connErr == nil {
			out.attempts = attempt
			return out
		}
		lastErr = connErr
		if res, ok := denied(connErr, attempt); ok {
			res.evidence.Kind = &verifierv1.Evidence_Http{Http: &verifierv1.HttpEvidence{Method: method, Url: url}}
			return res
		}
		if ctx.Err() != nil {
			return blocked(verifierv1.BlockReason_BLOCK_REASON_UNSPECIFIED, attempt, "cancelled")
		}
		if int(attempt) >= o.MaxAttempts || !sleep(ctx, o.backoff(attempt)) {
			res := blocked(verifierv1.BlockReason_BLOCK_REASON_SERVICE_UNREACHABLE, attempt,
				"%s, %s", connectError(lastErr), plural(int(attempt), "attempt"))
			res.evidence.Summary = fmt.Sprintf("%s %s not sent: %s, %s over %s", method, url, connectError(lastErr),
				plural(int(attempt), "attempt"), roundDuration(time.Since(first)).Round(100*time.Millisecond))
			res.evidence.Kind = &verifierv1.Evidence_Http{Http: &verifierv1.HttpEvidence{Method: method, Url: url}}
			return res
		}
	}
}

// httpAttempt makes one exchange. It answers a non-nil error only when no connection could be
// made (or it broke before any response): the caller retries those.
func httpAttempt(ctx context.Context, client *http.Client, o *Options, hc *verifierv1.HttpCheck,
	method, url string, header http.Header, timeout time.Duration) (outcome, error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var connected atomic.Bool
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { connected.Store(true) },
	})
	var body io.Reader
	if hc.GetBody() != "" {
		body = strings.NewReader(hc.GetBody())
	}
	req, err := http.NewRequestWithContext(actx, method, url, body)
	if err != nil {
		// The URL was validated; a request that cannot be built is the verifier's problem.
		return blocked(verifierv1.BlockReason_BLOCK_REASON_VERIFIER_ENVIRONMENT, 1, "build request: %v", err), nil
	}
	req.Header = header.Clone()

	ev := &verifierv1.HttpEvidence{Method: method, Url: url}
	evidence := &verifierv1.Evidence{Kind: &verifierv1.Evidence_Http{Http: ev}}
	var a assertions
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return outcome{}, ctx.Err()
		}
		if connected.Load() && errors.Is(actx.Err(), context.DeadlineExceeded) {
			// The server took the connection and never answered: that is the app's failure.
			ev.Latency = durationpb.New(time.Since(start))
			a.add("a response within "+timeout.String(), false, "no response")
			evidence.Summary = fmt.Sprintf("%s %s → no response within %s", method, url, timeout)
			evidence.Assertions = a.list
			return outcome{status: judge(&a), evidence: evidence}, nil
		}
		return outcome{}, err
	}
	defer resp.Body.Close()
	if resp.Request != nil && resp.Request.URL != nil {
		ev.Url = resp.Request.URL.String()
	}
	ev.Status = int32(resp.StatusCode)

	kept, total, readErr := readCapped(resp.Body, o.OutputCap)
	latency := time.Since(start)
	ev.Latency = durationpb.New(latency)
	ev.BodyExcerpt = head(kept, o.ExcerptBytes)
	ev.BodyBytes = total
	ev.BodyTruncated = total > int64(len(kept))

	e := hc.GetExpect()
	if readErr != nil {
		a.add("the whole body within "+timeout.String(), false, fmt.Sprintf("read %d bytes, then: %v", total, readErr))
	}
	if want := e.GetStatus(); want != 0 {
		a.add(fmt.Sprintf("status == %d", want), int32(resp.StatusCode) == want, resp.Status)
	} else {
		a.add("status is 2xx", resp.StatusCode >= 200 && resp.StatusCode < 300, resp.Status)
	}
	if len(e.GetHeaderContains()) > 0 {
		ev.Headers = map[string]string{}
		names := make([]string, 0, len(e.GetHeaderContains()))
		for name := range e.GetHeaderContains() {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			want := e.GetHeaderContains()[name]
			got := strings.Join(resp.Header.Values(name), ", ")
			ev.Headers[http.CanonicalHeaderKey(name)] = clean(got)
			actual := quoteHead(got)
			if len(resp.Header.Values(name)) == 0 {
				actual = "no such header"
			}
			a.add(fmt.Sprintf("header %s contains %q", http.CanonicalHeaderKey(name), want), len(resp.Header.Values(name)) > 0 && strings.Contains(got, want), actual)
		}
	}
	checkText(&a, textSource{label: "body", text: kept}, e.GetBody())
	checkJSONFields(&a, "body", kept, e.GetBodyJson())
	if max := e.GetMaxLatency(); max != nil {
		a.add(fmt.Sprintf("latency <= %s", max.AsDuration()), latency <= max.AsDuration(), roundDuration(latency).String())
	}
	evidence.Summary = fmt.Sprintf("%s %s → %d in %s, %s", method, ev.Url, resp.StatusCode, roundDuration(latency), plural(int(total), "byte"))
	evidence.Assertions = a.list
	return outcome{status: judge(&a), evidence: evidence}, nil
}

// readCapped reads r to the end, keeping its first max bytes and counting all of them.
func readCapped(r io.Reader, max int64) (kept string, total int64, err error) {
	var b strings.Builder
	n, err := io.Copy(&b, io.LimitReader(r, max))
	total = n
	if err == nil {
		var rest int64
		rest, err = io.Copy(io.Discard, r)
		total += rest
	}
	return b.String(), total, err
}

// connectError shortens a connection error for people: "connect 127.0.0.1:3000: connection
// refused" rather than Go's layered message.
func connectError(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		inner := opErr.Err
		var sysErr interface{ Unwrap() error }
		if errors.As(inner, &sysErr) && sysErr.Unwrap() != nil {
			inner = sysErr.Unwrap()
		}
		addr := ""
		if opErr.Addr != nil {
			addr = opErr.Addr.String()
		}
		return fmt.Sprintf("connect %s: %v", addr, inner)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return fmt.Sprintf("resolve %s: %s", dnsErr.Name, dnsErr.Err)
	}
	return err.Error()
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
