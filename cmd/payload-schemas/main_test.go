package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unitlet/unitlet/shared/payload"
)

func TestWriteCheckCompare(t *testing.T) {
	dir := t.TempDir()
	cur := filepath.Join(dir, "schemas.json")
	call := func(args ...string) (int, string) {
		var out, errs strings.Builder
		code := run(args, "main", &out, &errs)
		return code, out.String() + errs.String()
	}
	if code, out := call("write", cur); code != 0 {
		t.Fatalf("write: exit %d: %s", code, out)
	}
	if code, out := call("check", cur); code != 0 || !strings.Contains(out, "payload schemas are current") {
		t.Errorf("check after write: exit %d: %s", code, out)
	}

	// A baseline with a field this build lacks: cur removed it.
	base := payload.Describe()
	base.Schemas[payload.SchemaPod].Fields["spec.legacyField"] = "string"
	baseFile := filepath.Join(dir, "base.json")
	if err := os.WriteFile(baseFile, base.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := call("compare", baseFile, cur)
	if want := "proto-check: breaking payload change against main: core/v1.Pod: spec.legacyField: field removed (was string)"; code != 1 || !strings.Contains(out, want) {
		t.Errorf("compare with a removed field: exit %d: %s\nwant exit 1 and %s", code, out, want)
	}
	// The other way round the field is added: compatible.
	if code, out := call("compare", cur, baseFile); code != 0 || !strings.Contains(out, "payload schemas compatible with main") {
		t.Errorf("compare with an added field: exit %d: %s", code, out)
	}
	// A file that is not what this build describes is stale.
	if code, out := call("check", baseFile); code != 1 || !strings.Contains(out, "is stale; run make proto and commit") {
		t.Errorf("check of a stale file: exit %d: %s", code, out)
	}
	if code, _ := call("compare", cur); code != 2 {
		t.Errorf("compare with one file: exit %d, want 2", code)
	}
}
