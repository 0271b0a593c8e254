package nodeconfig

import (
	"strings"
	"testing"

	"github.com/unitlet/unitlet/shared/payload"
)

func TestDecodeTakesTheKubeletConfigurationSchemaOrNone(t *testing.T) {
	for _, schema := range []string{"", payload.SchemaKubeletConfiguration} {
		nc := nodeConfig(1, `{"maxPods":42}`)
		nc.KubeletConfigurationSchema = schema
		c, err := Decode(nc)
		if err != nil || c.KubeletConfiguration.MaxPods != 42 {
			t.Errorf("schema %q: %v; want maxPods 42", schema, err)
		}
	}
}

func TestDecodeRefusesAnUnknownKubeletConfigurationSchema(t *testing.T) {
	nc := nodeConfig(1, `{"maxPods":42}`)
	nc.KubeletConfigurationSchema = "kubelet.config.k8s.io/v1.KubeletConfiguration"
	_, err := Decode(nc)
	want := `unitlet.config.v1.NodeConfig.kubelet_configuration: unknown schema "kubelet.config.k8s.io/v1.KubeletConfiguration" in kubelet_configuration_schema; this reader understands "kubelet.config.k8s.io/v1beta1.KubeletConfiguration"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Decode: %v, want it refused: %s", err, want)
	}
}
