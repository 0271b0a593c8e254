package nodeapi

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds of a node log query, the kubelet's (KEP-2258).
const (
	// maxLogQueryTailLines bounds tailLines.
	maxLogQueryTailLines = 100000
	// maxLogQueryServiceLength bounds one service name.
	maxLogQueryServiceLength = 256
	// maxLogQueryServices bounds the services of one query.
	maxLogQueryServices = 4
)

// unsafeServiceName matches any character a service name may not hold: only letters,
// digits and - _ . : @ reach journalctl's command line, so no name can read as an option
// or a glob.
var unsafeServiceName = regexp.MustCompile(`[^a-zA-Z0-9\-_.:@]`)

// logQueryParams are the query parameters of the node log query, in the order the kubelet
// reads them.
var logQueryParams = []string{"query", "sinceTime", "untilTime", "boot", "tailLines", "pattern"}

// logQuery is a node log query (/logs/?query=...): the journal of up to four services, or
// one file under the log directory.
type logQuery struct {
	// Services are the units whose journal is read (a name with no slash).
	Services []string
	// Files are the queries naming a file (with a / or \): at most one, with no options.
	Files []string
	logQueryOptions
}

// logQueryOptions narrow the journal read; none applies to a file.
type logQueryOptions struct {
	SinceTime *time.Time // entries at or after (RFC 3339)
	UntilTime *time.Time // entries at or before (RFC 3339)
	TailLines *int       // the last lines only, 0 to 100000
	Boot      *int       // one boot: 0 the current, -1 the one before, ...
	Pattern   string     // entries matching this regular expression (PCRE2 in journalctl)
}

// parseLogQuery reads the query parameters as the kubelet does; each one that does not
// parse is an error naming it (the caller answers 400). A request with none of them is a
// nil query: the file server answers it.
func parseLogQuery(v url.Values) (*logQuery, field.ErrorList) {
	var errs field.ErrorList
	q := &logQuery{}
	queries, present := v["query"]
	for _, s := range queries {
		switch {
		case strings.ContainsAny(s, `/\`):
			// A slash means a file under the log directory.
			q.Files = append(q.Files, s)
		case strings.TrimSpace(s) != "":
			q.Services = append(q.Services, s)
		}
	}
	if present && len(q.Files) == 0 && len(q.Services) == 0 {
		errs = append(errs, field.Invalid(field.NewPath("query"), queries, "may not be empty"))
	}
	parseTime := func(name string) *time.Time {
		s := v.Get(name)
		if s == "" {
			return nil
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), s, "invalid time format"))
			return nil
		}
		return &t
	}
	parseInt := func(name string) *int {
		s := v.Get(name)
		if s == "" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), s, err.Error()))
			return nil
		}
		return &n
	}
	q.SinceTime = parseTime("sinceTime")
	q.UntilTime = parseTime("untilTime")
	q.Boot = parseInt("boot")
	q.TailLines = parseInt("tailLines")
	q.Pattern = v.Get("pattern")
	if len(errs) > 0 {
		return nil, errs
	}
	if q.empty() {
		return nil, nil
	}
	return q, nil
}

// empty reports whether the request asked for nothing the query reads.
func (q *logQuery) empty() bool {
	return len(q.Services) == 0 && len(q.Files) == 0 && q.logQueryOptions == (logQueryOptions{})
}

// validate checks a parsed query as the kubelet does (the caller answers 406): safe
// service names, at most four; a file alone, existing under logDir; sinceTime before
// untilTime; boot at most 0; tailLines from 0 to 100000; pattern a regular expression.
func (q *logQuery) validate(logDir string) field.ErrorList {
	var errs field.ErrorList
	queryPath := field.NewPath("query")
	for _, s := range q.Services {
		if err := checkServiceName(s); err != nil {
			errs = append(errs, field.Invalid(queryPath, s, err.Error()))
		}
	}
	if len(q.Services) > maxLogQueryServices {
		errs = append(errs, field.TooMany(queryPath, len(q.Services), maxLogQueryServices))
	}
	switch {
	case len(q.Files) == 0 && len(q.Services) == 0:
		errs = append(errs, field.Required(queryPath, "cannot be empty with options"))
	case len(q.Files) > 0 && len(q.Services) > 0:
		errs = append(errs, field.Invalid(queryPath, fmt.Sprintf("%v, %v", q.Files, q.Services), "cannot specify a file and service"))
	case len(q.Files) > 1:
		errs = append(errs, field.Invalid(queryPath, q.Files, "cannot specify more than one file"))
	case len(q.Files) == 1 && q.logQueryOptions != (logQueryOptions{}):
		errs = append(errs, field.Invalid(queryPath, q.Files, "cannot specify file with options"))
	case len(q.Files) == 1:
		if err := statInRoot(logDir, q.Files[0]); err != nil {
			errs = append(errs, field.Invalid(queryPath, q.Files, err.Error()))
		}
	}
	if q.SinceTime != nil && q.UntilTime != nil && q.SinceTime.After(*q.UntilTime) {
		errs = append(errs, field.Invalid(field.NewPath("untilTime"), q.UntilTime, "must be after `sinceTime`"))
	}
	if q.Boot != nil && *q.Boot > 0 {
		errs = append(errs, field.Invalid(field.NewPath("boot"), *q.Boot, "must be less than 1"))
	}
	if q.TailLines != nil {
		if msgs := utilvalidation.IsInRange(*q.TailLines, 0, maxLogQueryTailLines); len(msgs) > 0 {
			errs = append(errs, field.Invalid(field.NewPath("tailLines"), *q.TailLines, msgs[0]))
		}
	}
	if _, err := syntax.Parse(q.Pattern, syntax.Perl); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("pattern"), q.Pattern, err.Error()))
	}
	return errs
}

// checkServiceName refuses a name too long or with a character outside the safe set.
func checkServiceName(s string) error {
	if len(s) > maxLogQueryServiceLength {
		return fmt.Errorf("length must be less than %d", maxLogQueryServiceLength)
	}
	if unsafeServiceName.MatchString(s) {
		return fmt.Errorf("input contains unsupported characters")
	}
	return nil
}

// statInRoot checks that name is a file or directory inside dir, reached without leaving
// it (no "..", no symbolic link pointing out).
func statInRoot(dir, name string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	_, err = root.Stat(name)
	return err
}
