package payload

import (
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	certsv1 "github.com/unitlet/unitlet/proto/unitlet/certs/v1"
	configv1 "github.com/unitlet/unitlet/proto/unitlet/config/v1"
	daemonv1 "github.com/unitlet/unitlet/proto/unitlet/daemon/v1"
	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	statusv1 "github.com/unitlet/unitlet/proto/unitlet/status/v1"
	volumesv1 "github.com/unitlet/unitlet/proto/unitlet/volumes/v1"
)

// busFiles are the bus's proto files; TestBusFilesAreAllHere fails when one is missing.
var busFiles = []protoreflect.FileDescriptor{
	certsv1.File_unitlet_certs_v1_certs_proto,
	configv1.File_unitlet_config_v1_config_proto,
	daemonv1.File_unitlet_daemon_v1_daemon_proto,
	evictionv1.File_unitlet_eviction_v1_eviction_proto,
	podsyncv1.File_unitlet_podsync_v1_podsync_proto,
	statusv1.File_unitlet_status_v1_status_proto,
	volumesv1.File_unitlet_volumes_v1_volumes_proto,
}

// notPayloads are bytes fields of the bus that carry no encoded payload, each with why.
// None so far: every bytes field is a payload and needs a schema name.
var notPayloads = map[string]string{}

func TestBusFilesAreAllHere(t *testing.T) {
	protos, err := filepath.Glob("../../proto/unitlet/*/*/*.proto")
	if err != nil || len(protos) == 0 {
		t.Fatalf("no proto files under ../../proto/unitlet (%v)", err)
	}
	var have []string
	for _, fd := range busFiles {
		have = append(have, fd.Path())
	}
	for _, p := range protos {
		rel, _ := filepath.Rel("../../proto", p)
		if !slices.Contains(have, filepath.ToSlash(rel)) {
			t.Errorf("%s is not in busFiles: add its Go package's file descriptor, so its bytes fields are checked", rel)
		}
	}
}

// TestEveryBytesFieldIsAPayload fails when a bus message has a bytes field that is not in
// Fields (a new payload without a schema name) nor in notPayloads.
func TestEveryBytesFieldIsAPayload(t *testing.T) {
	known := map[string]bool{}
	for _, f := range Fields {
		known[f.String()] = true
	}
	seen := map[string]bool{}
	for _, fd := range busFiles {
		eachMessage(fd.Messages(), func(md protoreflect.MessageDescriptor) {
			for i := range md.Fields().Len() {
				field := md.Fields().Get(i)
				if field.Kind() != protoreflect.BytesKind {
					continue
				}
				name := string(field.FullName())
				seen[name] = true
				if !known[name] && notPayloads[name] == "" {
					t.Errorf("%s is a bytes field with no schema name: add a string field beside it naming its schema and a Field to payload.Fields (or, if it carries no encoded payload, an entry in notPayloads saying why)", name)
				}
			}
		})
	}
	for name := range known {
		if !seen[name] {
			t.Errorf("payload.Fields has %s, which is no bytes field of the bus", name)
		}
	}
}

func TestEveryPayloadFieldHasItsSchemaField(t *testing.T) {
	messages := map[string]protoreflect.MessageDescriptor{}
	for _, fd := range busFiles {
		eachMessage(fd.Messages(), func(md protoreflect.MessageDescriptor) { messages[string(md.FullName())] = md })
	}
	for _, f := range Fields {
		md := messages[f.Message]
		if md == nil {
			t.Errorf("%s: no message %s on the bus", f, f.Message)
			continue
		}
		sf := md.Fields().ByName(protoreflect.Name(f.SchemaField))
		if sf == nil || sf.Kind() != protoreflect.StringKind || sf.IsList() {
			t.Errorf("%s: %s has no string field %s", f, f.Message, f.SchemaField)
		}
		if !slices.Contains(f.Read, f.Write) {
			t.Errorf("%s writes %s, which it does not read", f, f.Write)
		}
	}
}

func eachMessage(mds protoreflect.MessageDescriptors, fn func(protoreflect.MessageDescriptor)) {
	for i := range mds.Len() {
		md := mds.Get(i)
		fn(md)
		eachMessage(md.Messages(), fn)
	}
}
