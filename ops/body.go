package ops

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Request bodies on the ops listener. No endpoint takes more than maxBody,
// and only an admin action or a dashboard login reads one. Go's server
// would read what a handler left of a body (up to 256 KiB) before the
// next request, under the whole read timeout: a peer that trickles a body
// to /healthz would hold its place that long, for no credential. So a
// body must come within BodyTimeout of the request's headers, and a
// request whose body was not read to its end is answered with
// "Connection: close" and its connection closed, not drained.

// BodyTimeout bounds the reading of a request body, from the end of its
// headers. Bodies here are a few hundred bytes, sent with the headers.
const BodyTimeout = 2 * time.Second

// boundBody runs next for a request with a body under the bounds above.
func boundBody(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		next(w, r)
		return
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(BodyTimeout))
	body := &trackedBody{ReadCloser: r.Body}
	r.Body = body
	cw := &closingWriter{ResponseWriter: w, body: body}
	next(cw, r)
	if !body.eof.Load() {
		// What is left is not read: a deadline in the past makes the
		// server's drain fail at once, and the connection is closed
		// ("Connection: close", set before the answer's headers).
		cw.closeUnlessWritten()
		rc.SetReadDeadline(time.Unix(1, 0))
	}
}

// trackedBody records that its reader reached the end.
type trackedBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// closingWriter adds "Connection: close" to the answer when the request's
// body has not been read to its end by the time the headers are written.
type closingWriter struct {
	http.ResponseWriter
	body  *trackedBody
	wrote bool
}

func (w *closingWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// closeUnlessWritten sets "Connection: close" if no header was written.
func (w *closingWriter) closeUnlessWritten() {
	if !w.wrote {
		w.Header().Set("Connection", "close")
	}
}

// Unwrap lets http.ResponseController reach the server's writer (Flush,
// deadlines).
func (w *closingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is the server writer's, for streamed answers.
func (w *closingWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
