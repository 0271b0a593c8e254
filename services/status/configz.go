package status

// configz is the body of /configz: the configuration in effect under "kubeletconfig", as the
// kubelet serves it.
func configz(raw []byte) []byte {
	return append(append([]byte(`{"kubeletconfig":`), raw...), '}')
}
