// Command suitetimes prints make test's table of where the time went: one row per step (a
// set-up build or a test suite), when it started after the first step, how long its build,
// its harness stacks' bring-up, its tests and the stacks' take-down took, its total and
// how it ended.
//
//	usage: suitetimes TIMES
//
// TIMES has a line per step, as deploy/timed.sh writes them: name, start and end (Unix
// seconds), exit status and the step's log, separated by tabs. A step named "X:build" is
// the build of step X: its time is X's build column. The stack columns come from the lines
// harness.Main prints in the step's log ("stack S is up in D", "stack S: tests ran in D",
// "stack S is down in D"), summed over the stacks a step brought up.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

type step struct {
	name            string
	start, end      int64
	rc              int
	log             string
	build           time.Duration
	hasBuild        bool
	up, tests, down time.Duration
	stacks          []string
}

var (
	upLine    = regexp.MustCompile(`^stack (\S+) (?:\([^)]*\) )?is up in (\S+)$`)
	testsLine = regexp.MustCompile(`^stack (\S+): tests ran in (\S+)$`)
	downLine  = regexp.MustCompile(`^stack (\S+) is down in (\S+)$`)
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: suitetimes TIMES")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "suitetimes:", err)
		os.Exit(1)
	}
	defer f.Close()
	steps, err := read(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "suitetimes: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	print(os.Stdout, steps)
}

// read parses the times file and each step's log; builds are folded into their steps.
func read(r io.Reader) ([]*step, error) {
	var steps []*step
	byName := map[string]*step{}
	builds := map[string]*step{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 5 {
			return nil, fmt.Errorf("line %d: %d fields, want name, start, end, exit status, log", n, len(fields))
		}
		s := &step{name: fields[0], log: fields[4]}
		var errs [3]error
		s.start, errs[0] = strconv.ParseInt(fields[1], 10, 64)
		s.end, errs[1] = strconv.ParseInt(fields[2], 10, 64)
		s.rc, errs[2] = strconv.Atoi(fields[3])
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
		}
		if base, ok := strings.CutSuffix(s.name, ":build"); ok {
			builds[base] = s
			continue
		}
		steps = append(steps, s)
		byName[s.name] = s
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for base, b := range builds {
		s := byName[base]
		if s == nil {
			// A build whose suite never ran (its build failed): a row of its own.
			b.name, b.build, b.hasBuild = base, time.Duration(b.end-b.start)*time.Second, true
			b.end = b.start
			steps = append(steps, b)
			continue
		}
		s.build, s.hasBuild = time.Duration(b.end-b.start)*time.Second, true
		if b.rc != 0 {
			s.rc = b.rc
		}
	}
	for _, s := range steps {
		if s.log != "" {
			stackTimes(s)
		}
	}
	slices.SortStableFunc(steps, func(a, b *step) int { return int(a.start - b.start) })
	return steps, nil
}

// stackTimes adds up the harness's lines in s's log; a log that cannot be read adds none.
func stackTimes(s *step) {
	f, err := os.Open(s.log)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		for _, m := range []struct {
			re  *regexp.Regexp
			add *time.Duration
		}{{upLine, &s.up}, {testsLine, &s.tests}, {downLine, &s.down}} {
			g := m.re.FindStringSubmatch(line)
			if g == nil {
				continue
			}
			d, err := time.ParseDuration(g[2])
			if err != nil {
				continue
			}
			*m.add += d
			if m.re == upLine && !slices.Contains(s.stacks, g[1]) {
				s.stacks = append(s.stacks, g[1])
			}
		}
	}
}

func print(w io.Writer, steps []*step) {
	if len(steps) == 0 {
		return
	}
	first := steps[0].start
	var last int64
	for _, s := range steps {
		first, last = min(first, s.start), max(last, s.end)
	}
	fmt.Fprintf(w, "== make test: where the time went (seconds; start is after make test's first step)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tstart\tbuild\tstack up\ttests\tdown\ttotal\tresult\tstacks\t")
	for _, s := range steps {
		total := time.Duration(s.end-s.start)*time.Second + s.build
		result := "ok"
		if s.rc != 0 {
			result = fmt.Sprintf("FAIL (%d)", s.rc)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t\n", s.name, s.start-first,
			secs(s.build, s.hasBuild), secs(s.up, s.up > 0), secs(s.tests, s.tests > 0), secs(s.down, s.down > 0),
			total.Seconds(), result, strings.Join(s.stacks, ","))
	}
	tw.Flush()
	fmt.Fprintf(w, "make test took %d s (%s) from its first step to its last step's end\n", last-first, (time.Duration(last-first) * time.Second).String())
}

func secs(d time.Duration, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 0, 64)
}
