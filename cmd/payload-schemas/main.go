// Command payload-schemas writes and checks proto/payloads/schemas.json, the description
// of the payloads the bus carries in bytes fields (shared/payload), for make proto and
// make proto-check:
//
//	payload-schemas write FILE         describe this build's payload schemas into FILE
//	payload-schemas check FILE         fail when FILE is not what write would write
//	payload-schemas compare BASE FILE  fail when FILE breaks a schema of BASE
//	                                   (BASE_NAME in the environment names BASE)
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/unitlet/unitlet/shared/payload"
)

const usage = "usage: payload-schemas write FILE | check FILE | compare BASE FILE"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv("BASE_NAME"), os.Stdout, os.Stderr))
}

// run is the command: 0 done, 1 a stale or breaking file (or a failure), 2 bad usage.
func run(args []string, baseName string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 2 && args[0] == "write":
		if err := os.WriteFile(args[1], payload.Describe().Marshal(), 0o644); err != nil {
			fmt.Fprintf(stderr, "payload-schemas: %v\n", err)
			return 1
		}
		return 0
	case len(args) == 2 && args[0] == "check":
		committed, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "proto-check: %v; run make proto and commit\n", err)
			return 1
		}
		if !bytes.Equal(committed, payload.Describe().Marshal()) {
			fmt.Fprintf(stdout, "proto-check: %s is stale; run make proto and commit\n", args[1])
			return 1
		}
		fmt.Fprintf(stdout, "proto-check: payload schemas are current (%s)\n", args[1])
		return 0
	case len(args) == 3 && args[0] == "compare":
		base, err := readFile(args[1])
		if err == nil {
			var cur payload.File
			if cur, err = readFile(args[2]); err == nil {
				return report(payload.Breaking(base, cur), baseName, stdout)
			}
		}
		fmt.Fprintf(stderr, "payload-schemas: %v\n", err)
		return 1
	}
	fmt.Fprintln(stderr, usage)
	return 2
}

func report(breaking []string, baseName string, stdout io.Writer) int {
	if baseName == "" {
		baseName = "the baseline"
	}
	for _, b := range breaking {
		fmt.Fprintf(stdout, "proto-check: breaking payload change against %s: %s\n", baseName, b)
	}
	if len(breaking) > 0 {
		fmt.Fprintf(stdout, "proto-check: %d breaking payload schema change(s); a reader of the old schema would misread the new payloads: add a new schema name instead\n", len(breaking))
		return 1
	}
	fmt.Fprintf(stdout, "proto-check: payload schemas compatible with %s\n", baseName)
	return 0
}

func readFile(path string) (payload.File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return payload.File{}, err
	}
	f, err := payload.ParseFile(b)
	if err != nil {
		return payload.File{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}
