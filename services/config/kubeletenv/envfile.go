// Package kubeletenv reads the environment files that a kubelet's systemd unit takes part of
// its command line from (kubeadm's /var/lib/kubelet/kubeadm-flags.env and
// /etc/default/kubelet) and turns the kubelet flags in them into unitlet-config's.
package kubeletenv

import (
	"fmt"
	"strings"
)

// parseEnvFile decodes data as systemd decodes an EnvironmentFile= (systemd 252,
// parse_env_file): KEY=VALUE lines; '#' and ';' lines are comments; a value may mix bare,
// "double-quoted" and 'single-quoted' parts; a backslash escapes the next character in a
// bare part and `"\$ in a double-quoted one (before any other character it stays), and
// before a newline it continues the line. A bare part loses its trailing blank space; a
// carriage return ends a line as a newline does.
// A later assignment of a variable wins. Where systemd would skip a line with a log
// message (no '=', a key that is no variable name) this fails instead, so that no flag is
// dropped unnoticed.
func parseEnvFile(data string) (map[string]string, error) {
	vars := map[string]string{}
	line := 1
	i := 0
	for i < len(data) {
		// Before the key: blank space, an empty line or a comment.
		c := data[i]
		switch {
		case c == '\n' || c == '\r':
			line++
			i++
			continue
		case c == ' ' || c == '\t':
			i++
			continue
		case c == '#' || c == ';':
			i = skipComment(data, i, &line)
			continue
		}
		keyLine := line
		end := strings.IndexAny(data[i:], "=\n\r")
		if end < 0 || data[i+end] != '=' {
			return nil, fmt.Errorf("line %d: %q is no assignment (want NAME=VALUE)", keyLine, firstLine(data[i:]))
		}
		key := strings.TrimRight(data[i:i+end], " \t")
		if !validName(key) {
			return nil, fmt.Errorf("line %d: %q is no variable name", keyLine, key)
		}
		i += end + 1
		value, next, err := parseValue(data, i, &line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", keyLine, key, err)
		}
		vars[key] = value
		i = next
	}
	return vars, nil
}

// skipComment returns the index after the comment starting at i; a backslash before the
// newline continues it, as in systemd.
func skipComment(data string, i int, line *int) int {
	for ; i < len(data); i++ {
		switch data[i] {
		case '\\':
			if i+1 < len(data) && data[i+1] == '\n' {
				*line++
				i++
			}
		case '\n', '\r':
			*line++
			return i + 1
		}
	}
	return i
}

// parseValue reads the value starting at i up to the end of its line and returns it with
// the index after that line. Quotes open a quoted part only where a part may start: at
// the beginning of the value or after another quoted part; inside a bare part they are
// characters like any other, as in systemd.
func parseValue(data string, i int, line *int) (string, int, error) {
	var b strings.Builder
	// keep is the length of b without the bare part's trailing blank space.
	keep := 0
	bare := false
	for i < len(data) {
		c := data[i]
		switch {
		case c == '\n' || c == '\r':
			*line++
			return b.String()[:keep], i + 1, nil
		case c == '\\':
			bare = true
			if i+1 < len(data) && (data[i+1] == '\n' || data[i+1] == '\r') {
				*line++
			} else if i+1 < len(data) {
				b.WriteByte(data[i+1])
				keep = b.Len()
			}
			i += 2
		case !bare && (c == ' ' || c == '\t'):
			i++
		case !bare && (c == '"' || c == '\''):
			end, err := quoted(data, i, line, &b)
			if err != nil {
				return "", 0, err
			}
			keep = b.Len()
			i = end
		default:
			bare = true
			b.WriteByte(c)
			if c != ' ' && c != '\t' {
				keep = b.Len()
			}
			i++
		}
	}
	return b.String()[:keep], i, nil
}

// quoted appends the quoted part starting at data[i] (its opening quote) to b and returns
// the index after its closing quote. A quote left open fails (systemd would take the rest
// of the file as the value).
func quoted(data string, i int, line *int, b *strings.Builder) (int, error) {
	q := data[i]
	start := *line
	for i++; i < len(data); i++ {
		c := data[i]
		switch {
		case c == q:
			return i + 1, nil
		case q == '"' && c == '\\' && i+1 < len(data):
			i++
			switch data[i] {
			case '"', '\\', '`', '$':
				b.WriteByte(data[i])
			case '\n':
				*line++
			default:
				b.WriteByte('\\')
				b.WriteByte(data[i])
			}
		default:
			if c == '\n' {
				*line++
			}
			b.WriteByte(c)
		}
	}
	return 0, fmt.Errorf("the quote %c opened on line %d is not closed", q, start)
}

// validName says whether s may name an environment variable in an EnvironmentFile=.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func firstLine(s string) string {
	if i := strings.IndexAny(s, "\n\r"); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// words splits a value at whitespace as systemd does where an ExecStart= line names the
// variable bare ($KUBELET_KUBEADM_ARGS): no quote in the value groups anything.
func words(value string) []string {
	return strings.FieldsFunc(value, func(r rune) bool { return r == ' ' || r == '\t' || r == '\n' || r == '\r' })
}
