module github.com/unitlet/unitlet/services/config

go 1.26.0

require (
	github.com/fsnotify/fsnotify v1.9.0 // indirect
	github.com/spf13/pflag v1.1.0 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/sys v0.40.0 // indirect
	k8s.io/api v0.36.3 // indirect
	k8s.io/apimachinery v0.36.3 // indirect
	k8s.io/client-go v0.36.3 // indirect
	k8s.io/kubelet v0.36.3 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
