// Package envconfig reads unitlet's process settings from UNITLET_* environment variables
// into tagged structs, with errors that name the variable. It is a library for clients and
// services alike: it knows nothing of the daemon runtime.
package envconfig

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/caarlos0/env/v11"
)

// Prefix prefixes every environment variable unitlet reads.
const Prefix = "UNITLET_"

// Parse fills v, a pointer to a struct with `env` tags, from UNITLET_* variables. environ
// replaces the process environment when not nil (tests, and mains that pass theirs).
func Parse(v any, environ map[string]string) error {
	opts := env.Options{Prefix: Prefix}
	if environ != nil {
		opts.Environment = environ
	}
	if err := env.ParseWithOptions(v, opts); err != nil {
		return fmt.Errorf("environment: %s", describe(v, err))
	}
	return nil
}

// Name is the variable that sets flag (--node-ip: UNITLET_NODE_IP).
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Map turns an environment as os.Environ gives it into the map Parse takes.
func Map(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// describe names the variable a parse error is about; the library names the Go field.
func describe(v any, err error) string {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err.Error()
	}
	var msgs []string
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if tag, ok := tagOf(reflect.TypeOf(v), pe.Name); ok {
				msgs = append(msgs, fmt.Sprintf("%s%s: %v", Prefix, tag, pe.Err))
				continue
			}
		}
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}

// tagOf finds the env tag of the field called name in struct t or its embedded structs.
func tagOf(t reflect.Type, name string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return "", false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Name == name {
			if tag, _, _ := strings.Cut(f.Tag.Get("env"), ","); tag != "" {
				return f.Tag.Get("envPrefix") + tag, true
			}
		}
		if f.Type.Kind() == reflect.Struct {
			if tag, ok := tagOf(f.Type, name); ok {
				return f.Tag.Get("envPrefix") + tag, true
			}
		}
	}
	return "", false
}
