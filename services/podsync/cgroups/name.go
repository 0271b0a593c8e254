package cgroups

import (
	"fmt"
	"path"
	"strings"
)

// Driver is the kubelet's cgroupDriver: who creates the node's cgroups.
type Driver string

// The two drivers the kubelet knows.
const (
	Cgroupfs Driver = "cgroupfs"
	Systemd  Driver = "systemd"
)

// sliceSuffix ends every systemd slice unit's name.
const sliceSuffix = ".slice"

// Name is a cgroup in driver-neutral form: its components from the hierarchy root,
// e.g. Name{"kubepods", "burstable", "pod<uid>"}. A nil or empty Name is the root.
type Name []string

// Child is n with one more component; n itself is left as it was.
func (n Name) Child(c string) Name {
	out := make(Name, len(n), len(n)+1)
	copy(out, n)
	return append(out, c)
}

// CgroupfsPath is the cgroup's path below the mount point as the cgroupfs driver lays it
// out: "/kubepods/burstable/pod<uid>", or "/" for the root.
func (n Name) CgroupfsPath() string {
	return "/" + strings.Join(n, "/")
}

// SystemdSlice is the name of the slice unit holding the cgroup: every component so far
// joined by "-", with a "-" inside a component written "_" so that it does not read as a
// level ("kubepods-burstable-pod12_34.slice"). The root is "-.slice".
func (n Name) SystemdSlice() string {
	if len(n) == 0 {
		return "-" + sliceSuffix
	}
	parts := make([]string, len(n))
	for i, c := range n {
		parts[i] = strings.ReplaceAll(c, "-", "_")
	}
	return strings.Join(parts, "-") + sliceSuffix
}

// SystemdPath is where systemd puts the slice's cgroup below the mount point: one
// directory per level, each named by that level's slice
// ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice").
func (n Name) SystemdPath() string {
	if len(n) == 0 {
		return "/"
	}
	var b strings.Builder
	for i := range n {
		b.WriteString("/")
		b.WriteString(n[:i+1].SystemdSlice())
	}
	return b.String()
}

// String is the cgroupfs form, for messages.
func (n Name) String() string {
	return n.CgroupfsPath()
}

// validate refuses components that would name another directory, or, for systemd, a
// component that could not be told apart from another once escaped.
func (n Name) validate(d Driver) error {
	for _, c := range n {
		switch {
		case c == "" || c == "." || c == "..":
			return fmt.Errorf("cgroup name %q: component %q is not a directory name", []string(n), c)
		case strings.ContainsAny(c, "/\x00"):
			return fmt.Errorf("cgroup name %q: component %q holds a '/' or NUL", []string(n), c)
		case d == Systemd && strings.Contains(c, "_"):
			return fmt.Errorf("cgroup name %q: component %q holds '_', which the systemd driver uses for '-'", []string(n), c)
		}
	}
	return nil
}

// ParseCgroupRoot turns the kubelet configuration's cgroupRoot into a Name. "" and "/" are
// the root for both drivers. For cgroupfs it is a path ("/unitlet" or "/a/b"). For systemd
// it is a slice name ("unitlet.slice", "a-b.slice", each "-" starting a level and "_"
// standing for "-" inside one) or that slice's expanded path ("/a.slice/a-b.slice").
func ParseCgroupRoot(root string, d Driver) (Name, error) {
	if root == "" || root == "/" {
		return nil, nil
	}
	var n Name
	var err error
	switch d {
	case Cgroupfs:
		n, err = parseCgroupfsRoot(root)
	case Systemd:
		n, err = parseSystemdRoot(root)
	default:
		return nil, fmt.Errorf("cgroupRoot %q: unknown cgroupDriver %q, want %q or %q", root, d, Cgroupfs, Systemd)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroupRoot %q: %w", root, err)
	}
	if err := n.validate(d); err != nil {
		return nil, fmt.Errorf("cgroupRoot %q: %w", root, err)
	}
	return n, nil
}

func parseCgroupfsRoot(root string) (Name, error) {
	trimmed := strings.TrimSuffix(strings.TrimPrefix(root, "/"), "/")
	n := Name(strings.Split(trimmed, "/"))
	for _, c := range n {
		if c == "" || c == "." || c == ".." {
			return nil, fmt.Errorf("with cgroupDriver cgroupfs it must be a clean path such as \"/unitlet\"")
		}
	}
	return n, nil
}

func parseSystemdRoot(root string) (Name, error) {
	const want = "with cgroupDriver systemd it must be \"/\" or a slice such as \"unitlet.slice\""
	leaf := path.Base(root)
	if !strings.HasSuffix(leaf, sliceSuffix) {
		return nil, fmt.Errorf("%s", want)
	}
	n, err := parseSlice(leaf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", want, err)
	}
	// A path form must be the leaf's own expansion, not some other nesting.
	if strings.Contains(root, "/") && path.Clean("/"+root) != n.SystemdPath() {
		return nil, fmt.Errorf("%s: a path must be the slice's own nesting %q", want, n.SystemdPath())
	}
	return n, nil
}

// parseSlice decodes a slice unit's name into its components: "a-b_c.slice" is
// {"a", "b-c"}, "-.slice" the root.
func parseSlice(slice string) (Name, error) {
	base, ok := strings.CutSuffix(slice, sliceSuffix)
	if !ok {
		return nil, fmt.Errorf("%q is not a slice", slice)
	}
	if base == "-" {
		return nil, nil
	}
	parts := strings.Split(base, "-")
	n := make(Name, len(parts))
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("slice %q has an empty level", slice)
		}
		n[i] = strings.ReplaceAll(p, "_", "-")
	}
	return n, nil
}
