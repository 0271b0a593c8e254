package nodeinfo

import "syscall"

// filesystemSize is the capacity in bytes of the filesystem holding path, as the kubelet
// (cadvisor) counts it: total blocks times block size.
func filesystemSize(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * int64(st.Bsize), nil
}
