// Package vmagent is the agent channel of the harness's vm nodes: one virtio-serial port
// between the host and the guest, multiplexed with yamux into streams. Each stream the
// host opens carries one request, a JSON line, then its data:
//
//   - exec: the guest runs a command; the rest of the stream from the host is its standard
//     input; the guest answers with frames (kind, length, data): standard output, standard
//     error, and last the exit code or the error that kept it from starting.
//   - dial: the guest connects to a Unix socket (a bus socket in /run/unitlet) and answers
//     one status byte (0 connected, else 1 and a message); then the stream is that
//     connection, both ways.
//
// When its session starts the guest opens one stream and writes Hello on it: the host knows
// the agent runs and opens nothing before that (bytes sent before the guest opens its port
// stay queued in qemu, which is harmless, but waiting keeps requests from piling up).
package vmagent

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Hello is what the guest writes on the first stream of a session.
const Hello = "unitlet-vmagent ready\n"

// Request is the first line of a stream from the host.
type Request struct {
	// Exec is a command and its arguments, run as root with Env.
	Exec []string `json:"exec,omitempty"`
	// Dial is the path of a Unix socket in the guest.
	Dial string `json:"dial,omitempty"`
}

// Frame kinds of an exec stream.
const (
	frameStdout byte = 1
	frameStderr byte = 2
	frameExit   byte = 3 // data: the exit code, 4 bytes big-endian
	frameError  byte = 4 // data: why the command did not run
)

// Env is the environment of commands run by the agent.
var Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8", "SYSTEMD_COLORS=0", "SYSTEMD_PAGER="}

// Config is yamux's configuration on both sides: no keepalive (the guest may take a while
// to answer under emulation; a dead qemu closes the host's connection anyway), quiet logs.
func Config() *yamux.Config {
	c := yamux.DefaultConfig()
	c.EnableKeepAlive = false
	c.ConnectionWriteTimeout = time.Minute
	c.StreamOpenTimeout = time.Minute
	c.LogOutput = io.Discard
	return c
}

// Serve is the guest's side of one session over port: it says hello, then answers every
// stream the host opens, until the session fails.
func Serve(port io.ReadWriteCloser) error {
	sess, err := yamux.Server(port, Config())
	if err != nil {
		return err
	}
	defer sess.Close()
	hello, err := sess.Open()
	if err != nil {
		return fmt.Errorf("open the hello stream: %w", err)
	}
	if _, err := io.WriteString(hello, Hello); err != nil {
		return fmt.Errorf("write hello: %w", err)
	}
	_ = hello.Close()
	for {
		st, err := sess.Accept()
		if err != nil {
			return fmt.Errorf("accept a stream: %w", err)
		}
		go serveStream(st)
	}
}

// HalfCloser is a stream whose writing side closes alone (yamux streams and Unix
// connections both can).
type HalfCloser interface {
	io.ReadWriter
	CloseWrite() error
}

// yamuxHalf closes a yamux stream's writing side: its Close sends FIN and still reads.
type yamuxHalf struct{ net.Conn }

func (s yamuxHalf) CloseWrite() error { return s.Conn.Close() }

// HalfClose is a yamux stream as a HalfCloser.
func HalfClose(st net.Conn) HalfCloser { return yamuxHalf{st} }

func serveStream(st net.Conn) {
	defer st.Close()
	br := bufio.NewReader(st)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return
	}
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		writeFrame(st, frameError, []byte("bad request: "+err.Error()))
		return
	}
	switch {
	case len(req.Exec) > 0:
		runExec(st, br, req.Exec)
	case req.Dial != "":
		c, err := net.DialTimeout("unix", req.Dial, 10*time.Second)
		if err != nil {
			_, _ = st.Write(append([]byte{1}, err.Error()...))
			return
		}
		defer c.Close()
		if _, err := st.Write([]byte{0}); err != nil {
			return
		}
		Splice(yamuxHalf{st}, br, c.(*net.UnixConn))
	default:
		writeFrame(st, frameError, []byte("empty request"))
	}
}

// frameWriter writes one kind of frame; exec's two outputs share the stream.
type frameWriter struct {
	mu   *sync.Mutex
	w    io.Writer
	kind byte
}

func (f frameWriter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := writeFrame(f.w, f.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func writeFrame(w io.Writer, kind byte, data []byte) error {
	hdr := make([]byte, 5)
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(data)))
	if _, err := w.Write(append(hdr, data...)); err != nil {
		return err
	}
	return nil
}

func runExec(st net.Conn, stdin io.Reader, args []string) {
	var mu sync.Mutex
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = Env
	cmd.Dir = "/"
	cmd.Stdout = frameWriter{&mu, st, frameStdout}
	cmd.Stderr = frameWriter{&mu, st, frameStderr}
	// Standard input through a pipe, so that Wait does not wait for the host to close it.
	in, err := cmd.StdinPipe()
	if err != nil {
		writeFrame(st, frameError, []byte(err.Error()))
		return
	}
	if err := cmd.Start(); err != nil {
		mu.Lock()
		writeFrame(st, frameError, []byte(err.Error()))
		mu.Unlock()
		return
	}
	go func() {
		_, _ = io.Copy(in, stdin)
		in.Close()
	}()
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + 9 // killed by a signal
		}
	case err != nil:
		mu.Lock()
		writeFrame(st, frameError, []byte(err.Error()))
		mu.Unlock()
		return
	}
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, uint32(code))
	mu.Lock()
	writeFrame(st, frameExit, b)
	mu.Unlock()
}

// Splice copies a to b and b to a, closing each writing side when its reader ends, and
// returns when both directions are done. ar reads a (it may hold bytes already buffered).
func Splice(a HalfCloser, ar io.Reader, b *net.UnixConn) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(b, ar)
		_ = b.CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(a, b)
		_ = a.CloseWrite()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// ExitError is a command's non-zero exit code in the guest.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// ExitCode is the command's exit code.
func (e *ExitError) ExitCode() int { return e.Code }

// Exec runs args in the guest over conn, a new stream (a connection to the host relay's
// agent socket): stdin (nil for none) is its input, its outputs go to stdout and stderr. A
// non-zero exit is an *ExitError.
func Exec(conn *net.UnixConn, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	defer conn.Close()
	req, err := json.Marshal(Request{Exec: args})
	if err != nil {
		return err
	}
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("send the command: %w", err)
	}
	go func() {
		if stdin != nil {
			_, _ = io.Copy(conn, stdin)
		}
		_ = conn.CloseWrite()
	}()
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(conn, hdr); err != nil {
			return fmt.Errorf("the agent's answer ended: %w", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(conn, data); err != nil {
			return fmt.Errorf("the agent's answer ended: %w", err)
		}
		switch hdr[0] {
		case frameStdout:
			_, _ = stdout.Write(data)
		case frameStderr:
			_, _ = stderr.Write(data)
		case frameExit:
			if code := int(binary.BigEndian.Uint32(data)); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		case frameError:
			return fmt.Errorf("in the guest: %s", data)
		default:
			return fmt.Errorf("the agent answered frame kind %d", hdr[0])
		}
	}
}

// Dial connects conn (a new stream) to the Unix socket path in the guest.
func Dial(conn io.ReadWriter, path string) error {
	req, err := json.Marshal(Request{Dial: path})
	if err != nil {
		return err
	}
	if _, err := conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("send the dial: %w", err)
	}
	st := make([]byte, 1)
	if _, err := io.ReadFull(conn, st); err != nil {
		return fmt.Errorf("dial %s in the guest: no answer: %w", path, err)
	}
	if st[0] != 0 {
		msg, _ := io.ReadAll(io.LimitReader(conn, 4096))
		return fmt.Errorf("dial %s in the guest: %s", path, msg)
	}
	return nil
}

// OpenPort opens the guest's end of the virtio-serial port.
func OpenPort(path string) (*os.File, error) { return os.OpenFile(path, os.O_RDWR, 0) }
