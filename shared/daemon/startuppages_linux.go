package daemon

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// startupPagesDelay is how long after it is ready a service unmaps its binary's pages
// (releaseStartupPages): long enough for its start-up (first lists, the first relist)
// to be over.
const startupPagesDelay = 10 * time.Second

// releaseStartupPagesAfter waits delay, unmaps the binary's read-only pages once, then
// waits for ctx to end.
func (d *Daemon) releaseStartupPagesAfter(ctx context.Context, delay time.Duration) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	before := rssFile()
	if err := releaseStartupPages(); err != nil {
		d.log.Warn("unmap start-up pages", "err", err)
	} else {
		d.log.Debug("unmapped start-up pages", "rss_file_kib_before", before, "rss_file_kib_after", rssFile())
	}
	<-ctx.Done()
}

// releaseStartupPages drops the process's mappings of its executable's read-only pages
// (text, rodata, the function tables) with MADV_DONTNEED. Package init (client-go's
// scheme registers every API group; about 700 packages each run their init) and start-up
// touch pages all over a 50 MB binary, and the kernel maps 64 KiB around each touch, so
// most of the binary stays mapped, and counted in the RSS, though little of it runs
// again. Nothing is lost: the pages stay in the page cache, unmapped and so the first the
// kernel reclaims (mapped executable pages it keeps longest), and a page used again is
// mapped again by the next access, a minor fault. Writable mappings are left alone.
func releaseStartupPages() error {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	var ranges [][2]uintptr
	s := bufio.NewScanner(f)
	for s.Scan() {
		// address perms offset dev inode path
		fields := strings.Fields(s.Text())
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("read /proc/self/maps: bad range %q", fields[0])
		}
		ranges = append(ranges, [2]uintptr{uintptr(start), uintptr(end)})
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("read /proc/self/maps: %w", err)
	}
	for _, r := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r[0], r[1]-r[0], unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("madvise %#x-%#x: %w", r[0], r[1], errno)
		}
	}
	return nil
}

// rssFile is RssFile of /proc/self/status in KiB, or -1.
func rssFile() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return -1
}
