package nodeapi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// limitSessions refuses a streaming session with 429 while maxStreamingSessions are open.
func (s *Server) limitSessions(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case s.sessions <- struct{}{}:
			defer func() { <-s.sessions }()
			h(w, r)
		default:
			w.Header().Set("Retry-After", "5")
			http.Error(w, fmt.Sprintf("too many streaming sessions open on this node (%d); try again later", cap(s.sessions)), http.StatusTooManyRequests)
		}
	}
}

// withIdleTimeout gives the streaming sessions (exec, attach, portForward) the
// configuration's streamingConnectionIdleTimeout: a session whose connection carries
// nothing either way for that long is closed. Zero leaves sessions unbounded.
func withIdleTimeout(timeout time.Duration, h http.HandlerFunc) http.HandlerFunc {
	if timeout <= 0 {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h(&idleHijacker{ResponseWriter: w, timeout: timeout}, r)
	}
}

// idleHijacker hands whoever takes the connection over (the upgrade proxy, the websocket
// translators) a connection that closes after timeout without traffic.
type idleHijacker struct {
	http.ResponseWriter
	timeout time.Duration
}

func (w *idleHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("this connection cannot be taken over for streaming (HTTP/1.1 is needed)")
	}
	conn, rw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	ic := &idleConn{Conn: conn, timeout: w.timeout}
	ic.touch()
	// What the server had read ahead stays first; everything after passes through ic.
	var r io.Reader = ic
	if n := rw.Reader.Buffered(); n > 0 {
		ahead, _ := rw.Reader.Peek(n)
		r = io.MultiReader(bytes.NewReader(append([]byte(nil), ahead...)), ic)
	}
	return ic, bufio.NewReadWriter(bufio.NewReader(r), bufio.NewWriter(ic)), nil
}

// Flush keeps the wrapped writer's flushing for responses that are not taken over.
func (w *idleHijacker) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *idleHijacker) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// idleConn moves its deadline timeout ahead on every read and write. A read waiting for
// the client is given more time by the other direction's traffic too: a deadline set while
// an operation waits applies to it.
type idleConn struct {
	net.Conn
	timeout time.Duration
}

func (c *idleConn) touch() { _ = c.Conn.SetDeadline(time.Now().Add(c.timeout)) }

func (c *idleConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.touch()
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.touch()
	}
	return n, err
}

// The proxies clear deadlines they do not need; the idle deadline stays.
func (c *idleConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.touch()
		return nil
	}
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.touch()
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	if t.IsZero() {
		c.touch()
		return nil
	}
	return c.Conn.SetWriteDeadline(t)
}
