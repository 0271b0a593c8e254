module github.com/unitlet/unitlet

go 1.26.0

require (
	github.com/unitlet/unitlet/proto v0.0.0
	github.com/unitlet/unitlet/services/config v0.0.0
	github.com/unitlet/unitlet/shared v0.0.0
)

require (
	github.com/spf13/pflag v1.1.0 // indirect
	go.yaml.in/yaml/v2 v2.4.3 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
	golang.org/x/text v0.32.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20251202230838-ff82c1b0f217 // indirect
	google.golang.org/grpc v1.79.3 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace (
	github.com/unitlet/unitlet/proto => ./proto
	github.com/unitlet/unitlet/services/config => ./services/config
	github.com/unitlet/unitlet/shared => ./shared
)
