package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/orion-sched/orion/internal/model"
)

// maxHTTPLog bounds how much of a response body goes to the log file.
const maxHTTPLog = 8 << 20

// MaxResponseHeaderBytes bounds what the default client reads of a
// response before its body: the status line and the headers. An endpoint
// that sends more fails the attempt ("server response headers exceeded")
// rather than handing the executor megabytes to quote.
const MaxResponseHeaderBytes = 64 << 10

// maxStatusLine bounds the status line as an attempt quotes it, in its
// output tail and in its error: whoever owns the endpoint chooses it.
const maxStatusLine = 256

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxResponseHeaderBytes = MaxResponseHeaderBytes
	return &http.Client{Transport: t}
}

// runHTTP sends one request (Method, default GET, with Headers and Body,
// which only notifications set) to URL and succeeds iff the final status
// (after redirects) is ExpectStatus, or any 2xx when it is 0 (a
// notification: webhooks answer 200, 202 or 204). The log gets the status
// line and the body (up to 8 MiB); OutputTail gets the status line and the
// first part of the body.
func (l *Local) runHTTP(ctx context.Context, a model.Attempt, r *model.Result) {
	f, err := l.createLog(a.AttemptID)
	if err != nil {
		r.Outcome, r.Error = model.Failed, "open log: "+err.Error()
		return
	}
	defer f.Close()
	method := a.Spec.Method
	if method == "" {
		method = http.MethodGet
	}
	want := a.Spec.ExpectStatus
	fail := func(msg string) {
		if !classify(ctx, r) {
			r.Outcome, r.Error = model.Failed, msg
		}
		fmt.Fprintf(f, "orion: %s\n", msg)
		r.OutputTail = validHead([]byte(msg), model.TailBytes)
	}
	var body io.Reader
	if a.Spec.Body != "" {
		body = strings.NewReader(a.Spec.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Spec.URL, body)
	if err != nil {
		fail("request: " + err.Error())
		return
	}
	for k, v := range a.Spec.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "orion")
	req.Header.Set("X-Orion-Attempt", a.AttemptID.String())
	resp, err := l.http.Do(req)
	if err != nil {
		fail(err.Error())
		return
	}
	defer resp.Body.Close()

	status := model.CutHead(resp.Proto+" "+resp.Status, maxStatusLine)
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "%s\n", status)
	head := make([]byte, model.TailBytes)
	n, rerr := io.ReadFull(resp.Body, head)
	head = head[:n]
	w.Write(head)
	if rerr == nil {
		_, rerr = io.Copy(w, io.LimitReader(resp.Body, maxHTTPLog-int64(n)))
	} else if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
		rerr = nil
	}
	if rerr != nil {
		fmt.Fprintf(w, "\norion: reading body: %v\n", rerr)
	}
	w.Flush()
	r.OutputTail = status + "\n" + validHead(head, model.TailBytes-len(status)-1)

	if rerr != nil && classify(ctx, r) { // the deadline hit while reading the body
		return
	}
	switch {
	case want == 0 && resp.StatusCode/100 != 2:
		r.Outcome, r.Error = model.Failed, fmt.Sprintf("unexpected status %s (want 2xx)", model.CutHead(resp.Status, maxStatusLine))
		return
	case want != 0 && resp.StatusCode != want:
		r.Outcome, r.Error = model.Failed, fmt.Sprintf("unexpected status %s (want %d)", model.CutHead(resp.Status, maxStatusLine), want)
		return
	}
	r.Outcome = model.Succeeded
}
