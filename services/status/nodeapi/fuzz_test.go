package nodeapi

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzQuery feeds the node API's query parsers (container logs, exec/attach streams,
// port-forward ports) any query string: none panics, and what each accepts keeps its
// promises.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"tailLines=10&follow=true&timestamps=1",
		"tail=all&sinceSeconds=5",
		"tail=-1&limitBytes=0",
		"sinceTime=2026-11-25T10:00:00Z&sinceSeconds=3",
		"stream=Stdout&previous=yes",
		"input=1&output=1&tty=1&command=sh&command=-c",
		"stdin=false&stderr=true",
		"port=8080,9090&port=1",
		"port=0&port=65536&port=,",
		"cmd=ls+-l+/",
		"%zz",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if opts, err := podLogOptions(q); err == nil {
			if verr := validatePodLogOptions(opts); verr == nil {
				if opts.TailLines != nil && *opts.TailLines < 0 {
					t.Errorf("%q: negative tailLines %d accepted", raw, *opts.TailLines)
				}
				if opts.SinceSeconds != nil && opts.SinceTime != nil {
					t.Errorf("%q: both sinceSeconds and sinceTime accepted", raw)
				}
				if opts.Stream != nil {
					t.Errorf("%q: stream accepted", raw)
				}
			}
		}
		if o, err := parseStreamOptions(q); err == nil {
			if !o.stdin && !o.stdout && !o.stderr {
				t.Errorf("%q: no stream, yet accepted", raw)
			}
			if o.tty && o.stderr {
				t.Errorf("%q: a tty with a separate stderr", raw)
			}
		}
		if ports, err := parsePorts(q["port"]); err == nil {
			want := 0
			for _, v := range q["port"] {
				want += strings.Count(v, ",") + 1
			}
			if len(ports) != want {
				t.Errorf("%q: %d ports from %d entries", raw, len(ports), want)
			}
			for _, p := range ports {
				if p < 1 || p > 65535 {
					t.Errorf("%q: port %d accepted", raw, p)
				}
			}
		}
	})
}
