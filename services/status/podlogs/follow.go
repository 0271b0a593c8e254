package podlogs

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/logs"
)

// recheck bounds the wait for a change of a followed log: a missed event costs at most this.
const recheck = time.Second

// followLog writes the log at path as opts asks and then follows it while the container
// runs. The start is the kubelet's (the live file, from opts' tail), but where the
// kubelet's reader jumps to whatever file is live when it sees the log recreated, followLog
// goes on through the files in the order they were written: when podsync rotates the log
// (<log>.<stamp>, the newest rotated file left plain) it reads on into the next rotated
// file, compressed or not, and then the live one, and only leaves a file once the runtime
// writes to the next (so no line written around the reopen is lost). A follower so slow
// that its file was compressed before it saw the rotation goes on with the live file.
func followLog(ctx context.Context, path, containerID string, opts *logs.LogOptions, rt Runtime, stdout, stderr io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open log file %s: %w", path, err)
	}
	cur := &logFile{f: f, r: f}
	defer func() { cur.f.Close() }()
	if opts.TailLines != nil {
		start, err := tailStart(f, *opts.TailLines)
		if err != nil {
			return fmt.Errorf("tail %d lines of %s: %w", *opts.TailLines, path, err)
		}
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return fmt.Errorf("seek in %s: %w", path, err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", path, err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	out := &lineWriter{stdout: stdout, stderr: stderr, opts: opts, remain: math.MaxInt64, newLine: true}
	if opts.LimitBytes != nil {
		out.remain = *opts.LimitBytes
	}
	br := bufio.NewReader(cur.r)
	var pending []byte
	read := 0
	for {
		// Every whole line there is now.
		for {
			b, err := br.ReadBytes('\n')
			pending = append(pending, b...)
			if err == io.EOF {
				break
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if done, err := out.line(pending); done || err != nil {
				return err
			}
			pending = pending[:0]
			if read++; read%identifyEvery == 0 {
				// A follower behind the writer learns early which rotated file it reads,
				// before the file is compressed under another name.
				if err := cur.identify(path); err != nil {
					return err
				}
			}
		}
		next, err := successor(path, cur)
		if err != nil {
			return err
		}
		if next != nil {
			// The runtime writes to the next file: what it wrote to this one is all there
			// once its last write, which may come after the first to the next, is in.
			if err := settle(ctx, cur); err != nil {
				next.f.Close()
				return err
			}
			if _, err := io.Copy(io.Discard, io.TeeReader(br, lineSink{&pending})); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			if done, err := out.lines(&pending); done || err != nil {
				return err
			}
			// A line cut off at a file's end cannot go on in the next file.
			pending = pending[:0]
			cur.f.Close()
			cur = next
			br = bufio.NewReader(cur.r)
			continue
		}
		running, err := isRunning(ctx, rt, containerID)
		if err != nil {
			return err
		}
		if !running {
			// What the container wrote last, then the end.
			if _, err := io.Copy(io.Discard, io.TeeReader(br, lineSink{&pending})); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			_, err := out.lines(&pending)
			return err
		}
		if err := waitChange(ctx, w); err != nil {
			return err
		}
	}
}

// settleQuiet and settleMax bound settle's wait.
const (
	settleQuiet = 50 * time.Millisecond
	settleMax   = time.Second
)

// settle waits until the plain file cur, which the runtime has left for the next, stops
// growing: settleQuiet without a change, at most settleMax. containerd's
// ReopenContainerLog starts the new file's writer before the old one has written what
// it holds, a line's start that the container had written without its newline, as a
// partial (P) entry; the line's end is the next file's first entry. The kubelet's
// reader moves to the new file as soon as it sees it and loses that start; a follower
// that left the old file at once did the same (a 900 000-line flood, followed through
// its rotations, once read a line's last three bytes as a line).
func settle(ctx context.Context, cur *logFile) error {
	if cur.r != io.Reader(cur.f) {
		return nil // a compressed file is whole
	}
	end := time.Now().Add(settleMax)
	size := int64(-1)
	for time.Now().Before(end) {
		info, err := cur.f.Stat()
		if err != nil {
			return fmt.Errorf("stat %s: %w", cur.f.Name(), err)
		}
		if info.Size() == size {
			return nil
		}
		size = info.Size()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settleQuiet):
		}
	}
	return nil
}

// logFile is the file being followed: r reads it (through gzip for a compressed one);
// stamp is its rotation stamp, "" while it was the live file when opened.
type logFile struct {
	f     *os.File
	r     io.Reader
	stamp string
}

// identifyEvery is how many lines a follower reads between looks at whether its live file
// was rotated meanwhile.
const identifyEvery = 4096

// identify finds, once the live file cur was opened as has been rotated, its rotation stamp
// by its inode among the plain rotated files of path.
func (cur *logFile) identify(path string) error {
	if cur.stamp != "" {
		return nil
	}
	if same, err := sameFile(path, cur.f); err != nil || same {
		return err
	}
	for _, name := range rotated(path) {
		if strings.HasSuffix(name, ".gz") {
			continue
		}
		if same, _ := sameFile(name, cur.f); same {
			cur.stamp = strings.TrimPrefix(name, path+".")
			return nil
		}
	}
	return nil
}

// successor is the file after cur once the runtime writes past it, nil while cur is the
// one being written. The live file is left when the path names another file and that file
// has data (the runtime has moved to it); a rotated file is left for the next rotated one,
// or the live file when it is the newest.
func successor(path string, cur *logFile) (*logFile, error) {
	if cur.stamp == "" {
		same, err := sameFile(path, cur.f)
		if err != nil || same {
			return nil, err
		}
		if err := cur.identify(path); err != nil {
			return nil, err
		}
		if cur.stamp == "" {
			// Compressed or removed before we saw it rotate: only the live file is known.
			return openLive(path)
		}
	}
	// The live file first: a rotation after this leaves a rotated file the listing shows.
	live, err := openLive(path)
	if err != nil {
		return nil, err
	}
	for _, name := range rotated(path) {
		stamp := strings.TrimSuffix(strings.TrimPrefix(name, path+"."), ".gz")
		if stamp <= cur.stamp {
			continue
		}
		if live != nil {
			live.f.Close()
		}
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil // compressed meanwhile: the next look finds it
		}
		if err != nil {
			return nil, fmt.Errorf("open rotated log %s: %w", name, err)
		}
		next := &logFile{f: f, r: f, stamp: stamp}
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("read rotated log %s: %w", name, err)
			}
			next.r = zr
		}
		return next, nil
	}
	if live != nil {
		a, errA := live.f.Stat()
		b, errB := cur.f.Stat()
		if errA == nil && errB == nil && os.SameFile(a, b) {
			// The runtime could not reopen the log, and the file was renamed back.
			live.f.Close()
			cur.stamp = ""
			return nil, nil
		}
	}
	return live, nil
}

// openLive opens the live file when the runtime has written to it; nil before.
func openLive(path string) (*logFile, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open log file %s: %w", path, err)
	}
	if info, err := f.Stat(); err != nil || info.Size() == 0 {
		f.Close()
		return nil, err
	}
	return &logFile{f: f, r: f}, nil
}

// rotated are the rotated files of the log at path, oldest first (the stamps sort as times).
func rotated(path string) []string {
	names, _ := filepath.Glob(path + ".*")
	names = slices.DeleteFunc(names, func(n string) bool { return strings.HasSuffix(n, ".tmp") })
	slices.SortFunc(names, func(a, b string) int {
		return strings.Compare(strings.TrimSuffix(a, ".gz"), strings.TrimSuffix(b, ".gz"))
	})
	return names
}

// sameFile reports whether name is the open file f; a missing name is not.
func sameFile(name string, f *os.File) (bool, error) {
	a, err := os.Stat(name)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", name, err)
	}
	b, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return os.SameFile(a, b), nil
}

func isRunning(ctx context.Context, rt Runtime, id string) (bool, error) {
	if rt == nil {
		return false, errors.New("no container runtime to ask whether the container runs")
	}
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.Unavailable {
		// As the kubelet's reader: containers run on while the runtime is unreachable.
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("container %s status: %w", id, err)
	}
	return st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING, nil
}

// waitChange waits for a change in the log's directory, at most recheck.
func waitChange(ctx context.Context, w *fsnotify.Watcher) error {
	t := time.NewTimer(recheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.Events:
	case <-w.Errors:
	case <-t.C:
	}
	return nil
}

// tailStart is the offset of the n-th line from the end of f (0 when it has fewer);
// n < 0 is the whole file.
func tailStart(f *os.File, n int64) (int64, error) {
	info, err := f.Stat()
	if err != nil || n < 0 {
		return 0, err
	}
	if n == 0 {
		return info.Size(), nil
	}
	const block = 64 << 10
	end := info.Size()
	buf := make([]byte, block)
	// A last line without its newline counts as a line.
	seen := int64(0)
	skipLast := true
	for pos := end; pos > 0; {
		size := min(int64(block), pos)
		pos -= size
		if _, err := f.ReadAt(buf[:size], pos); err != nil {
			return 0, err
		}
		for i := size - 1; i >= 0; i-- {
			if buf[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast && pos+i == end-1 {
				skipLast = false
				continue
			}
			if seen++; seen == n {
				return pos + i + 1, nil
			}
		}
	}
	return 0, nil
}

// lineSink appends what is written to a buffer.
type lineSink struct{ b *[]byte }

func (s lineSink) Write(p []byte) (int, error) { *s.b = append(*s.b, p...); return len(p), nil }

// lineWriter writes CRI log lines as the kubelet's reader does: since, timestamps (at the
// start of whole lines), the stream's writer (nil: not wanted), limitBytes.
type lineWriter struct {
	stdout, stderr io.Writer
	opts           *logs.LogOptions
	remain         int64
	newLine        bool
}

// lines writes every whole line in *b and keeps the rest there; done is true at the limit.
func (w *lineWriter) lines(b *[]byte) (bool, error) {
	for {
		i := bytes.IndexByte(*b, '\n')
		if i < 0 {
			return false, nil
		}
		done, err := w.line((*b)[:i+1])
		*b = (*b)[i+1:]
		if done || err != nil {
			return done, err
		}
	}
}

// line writes one CRI log line; done is true when limitBytes is reached. A line that does
// not parse is skipped.
func (w *lineWriter) line(l []byte) (bool, error) {
	ts, stream, partial, msg, ok := parseCRI(l)
	if !ok {
		return false, nil
	}
	startsLine := w.newLine
	w.newLine = !partial
	if ts.Before(w.opts.Since) {
		return false, nil
	}
	out := w.stdout
	if stream == runtimeapi.Stderr {
		out = w.stderr
	}
	if out == nil {
		return false, nil
	}
	if w.opts.Timestamp && startsLine {
		msg = append([]byte(ts.Format(time.RFC3339Nano)+" "), msg...)
	}
	if int64(len(msg)) > w.remain {
		msg = msg[:w.remain]
	}
	n, err := out.Write(msg)
	w.remain -= int64(n)
	if err != nil {
		return true, err
	}
	return w.remain <= 0, nil
}

// parseCRI splits "<RFC3339Nano> <stdout|stderr> <P|F>[:...] <message>\n": a partial (P)
// line's message has no newline.
func parseCRI(l []byte) (ts time.Time, stream runtimeapi.LogStreamType, partial bool, msg []byte, ok bool) {
	parts := bytes.SplitN(l, []byte{' '}, 4)
	if len(parts) != 4 {
		return ts, "", false, nil, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(parts[0]))
	stream = runtimeapi.LogStreamType(parts[1])
	if err != nil || (stream != runtimeapi.Stdout && stream != runtimeapi.Stderr) {
		return ts, "", false, nil, false
	}
	tag, _, _ := bytes.Cut(parts[2], []byte{':'})
	partial = runtimeapi.LogTag(tag) == runtimeapi.LogTagPartial
	msg = slices.Clone(parts[3])
	if partial {
		msg = bytes.TrimSuffix(msg, []byte{'\n'})
	}
	return ts, stream, partial, msg, true
}
