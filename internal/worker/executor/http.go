package executor

import (
	"bufio"
	"bytes"
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
	var reqBody io.Reader
	if a.Spec.Body != "" {
		reqBody = strings.NewReader(a.Spec.Body)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.Spec.URL, reqBody)
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
	// A task that takes outputs from the body keeps it (up to
	// MaxHTTPOutputBody) as well as logging it.
	var body *bytes.Buffer
	if a.Spec.Outputs != nil {
		body = bytes.NewBuffer(append([]byte(nil), head...))
	}
	if rerr == nil {
		var dst io.Writer = w
		if body != nil {
			dst = io.MultiWriter(w, &limitedBuffer{b: body, max: MaxHTTPOutputBody + 1})
		}
		_, rerr = io.Copy(dst, io.LimitReader(resp.Body, maxHTTPLog-int64(n)))
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
	if body != nil {
		if rerr != nil {
			r.Outcome, r.Error = model.Failed, "outputs: reading the response body: "+rerr.Error()
			return
		}
		if body.Len() > MaxHTTPOutputBody {
			r.Outcome, r.Error = model.Failed, fmt.Sprintf("outputs: the response body is over %d bytes, the most an http task that declares outputs reads", MaxHTTPOutputBody)
			return
		}
		var err error
		if r.Outputs, err = httpOutputs(a.Spec.Outputs, body.Bytes(), a.MaxOutputBytes); err != nil {
			r.Outcome, r.Error = model.Failed, err.Error()
			fmt.Fprintf(f, "\norion: %s\n", r.Error)
			return
		}
	}
	r.Outcome = model.Succeeded
}

// limitedBuffer keeps the first max bytes written to it and discards the
// rest, without failing the writer it is teed from.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
