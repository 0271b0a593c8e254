package criconfig

import "strings"

// Expand replaces each $(NAME) in s with lookup(NAME), following the Kubernetes
// expansion rules: "$$" is an escaped "$", a reference whose name lookup does not know
// stays as written, and a "$" not followed by "(" or "$", or a "$(" never closed, is
// kept literally.
func Expand(s string, lookup func(name string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				// Unterminated: keep "$(" and carry on after it.
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
