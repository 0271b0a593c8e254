package daemon

import (
	"encoding/json"
	"testing"
)

func TestReleaseStartupPagesUnmapsTheBinarysPages(t *testing.T) {
	before := rssFile()
	if before <= 0 {
		t.Fatalf("RssFile of the test process: %d KiB", before)
	}
	if err := releaseStartupPages(); err != nil {
		t.Fatal(err)
	}
	after := rssFile()
	// The code still runs: what is used again is mapped again.
	if _, err := json.Marshal(map[string]int{"after": after}); err != nil {
		t.Fatal(err)
	}
	t.Logf("RssFile %d KiB before, %d KiB after", before, after)
	if after >= before {
		t.Fatalf("RssFile %d KiB after releasing the start-up pages, was %d KiB", after, before)
	}
}
