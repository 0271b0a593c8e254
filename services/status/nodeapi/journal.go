package nodeapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strconv"
)

// journalTimeLayout is how --since and --until are given to journalctl: in UTC and saying
// so, since journalctl reads a time without a zone as local time whatever --utc says.
const journalTimeLayout = "2006-01-02 15:04:05 UTC"

// journalArgs are journalctl's arguments for a query of the journal of services: UTC,
// no pager, precise timestamps; then the query's time range, last lines, units, pattern
// and boot. Every value is validated before it gets here.
func journalArgs(q *logQuery, services []string) []string {
	args := []string{"--utc", "--no-pager", "--output=short-precise"}
	if q.SinceTime != nil {
		args = append(args, "--since="+q.SinceTime.UTC().Format(journalTimeLayout))
	}
	if q.UntilTime != nil {
		args = append(args, "--until="+q.UntilTime.UTC().Format(journalTimeLayout))
	}
	if q.TailLines != nil {
		args = append(args, "--pager-end", "--lines="+strconv.Itoa(*q.TailLines))
	}
	for _, s := range services {
		args = append(args, "--unit="+s)
	}
	if q.Pattern != "" {
		args = append(args, "--grep="+q.Pattern)
	}
	if q.Boot != nil {
		args = append(args, "--boot", strconv.Itoa(*q.Boot))
	}
	return args
}

// journal runs journalctl for the node log query.
type journal struct {
	// cmd is the journalctl program (a name looked up in PATH, or a path).
	cmd string
	// logDir holds the log files a service that does not log to the journal may write.
	logDir string
}

// copy writes what the query asks for to w: the journal of the services that log to it,
// then the log files under logDir of those that do not (only when no option narrows the
// query, since options apply to the journal alone). Failures are written as lines of the
// output, as the kubelet does: the status line was sent already.
func (j journal) copy(ctx context.Context, w io.Writer, q *logQuery) {
	native, files := j.splitServices(ctx, q.Services)
	if len(native) > 0 {
		j.copyServices(ctx, w, q, native)
	}
	if len(files) == 0 {
		return
	}
	if q.logQueryOptions != (logQueryOptions{}) {
		fmt.Fprintf(w, "\noptions present and query resolved to log files for %v\ntry without specifying options\n", files)
		return
	}
	for _, s := range files {
		copyServiceLogFile(ctx, w, j.logDir, s)
	}
}

// splitServices tells the services that have entries in the journal from those that do
// not (whose logs may be files). A service is in the journal when it is one of the units
// journalctl lists in _SYSTEMD_UNIT, by its unit name or its name plus ".service".
func (j journal) splitServices(ctx context.Context, services []string) (native, files []string) {
	units := map[string]bool{}
	out, err := exec.CommandContext(ctx, j.cmd, "--field", "_SYSTEMD_UNIT").Output()
	if err == nil {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			units[sc.Text()] = true
		}
	}
	for _, s := range services {
		if units[s] || units[s+".service"] {
			native = append(native, s)
		} else {
			files = append(files, s)
		}
	}
	return native, files
}

// copyServices streams journalctl's output (and its complaints) for services to w.
func (j journal) copyServices(ctx context.Context, w io.Writer, q *logQuery, services []string) {
	cmd := exec.CommandContext(ctx, j.cmd, journalArgs(q, services)...)
	cmd.Stdout = w
	cmd.Stderr = w
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		// journalctl did not run, or the request ended: journalctl's own failures are
		// already in the output.
		fmt.Fprintf(w, "\nerror: journal output not available\n")
	}
}

// copyServiceLogFile writes the first of dir/<s>, dir/<s>.log and dir/<s>/<s>.log that is
// a file, read without leaving dir; a line saying so when there is none.
func copyServiceLogFile(ctx context.Context, w io.Writer, dir, s string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", s, err)
		return
	}
	defer root.Close()
	for _, name := range []string{s, s + ".log", path.Join(s, s+".log")} {
		err = copyFileInRoot(ctx, w, root, name)
		if !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(w, "\nlog not found for %s\n", s)
	case err != nil:
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", s, err)
	}
}

// copyFileInRoot copies the file name of root to w until ctx ends; a directory is
// os.ErrNotExist.
func copyFileInRoot(ctx context.Context, w io.Writer, root *os.Root, name string) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return os.ErrNotExist
	}
	_, err = io.Copy(w, ctxReader{ctx: ctx, r: f})
	return err
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
