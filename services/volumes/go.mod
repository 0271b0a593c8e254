module github.com/unitlet/unitlet/services/volumes

go 1.26.0

replace (
	github.com/unitlet/unitlet/proto => ../../proto
	github.com/unitlet/unitlet/shared => ../../shared
)

require (
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
	google.golang.org/grpc v1.79.3 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
	k8s.io/api v0.36.3 // indirect
	k8s.io/apimachinery v0.36.3 // indirect
	k8s.io/client-go v0.36.3 // indirect
	k8s.io/component-helpers v0.36.3 // indirect
	k8s.io/cri-api v0.36.3 // indirect
	k8s.io/utils v0.0.0-20260210185600-b8788abfbbc2 // indirect
)
