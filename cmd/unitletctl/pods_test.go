package main

import (
	"strings"
	"testing"
	"time"

	podsyncv1 "github.com/unitlet/unitlet/proto/unitlet/podsync/v1"
	"github.com/unitlet/unitlet/shared/payload"
)

func TestPodRowsLeaveOutAStatusInAnUnknownSchema(t *testing.T) {
	status := []byte(`{"phase":"Running","podIP":"10.1.0.5"}`)
	pods := []*podsyncv1.Pod{
		{Namespace: "default", Name: "old", Status: status},
		{Namespace: "default", Name: "current", Status: status, StatusSchema: payload.SchemaPodStatus},
		{Namespace: "default", Name: "newer", Status: status, StatusSchema: "core/v2.PodStatus"},
	}
	var warn strings.Builder
	rows := podRows(pods, time.Now(), &warn)
	if len(rows) != 2 || rows[0].Name != "old" || rows[1].Name != "current" || rows[0].Phase != "Running" || rows[1].IP != "10.1.0.5" {
		t.Errorf("rows %+v; want old and current, Running at 10.1.0.5", rows)
	}
	want := `unitletctl: pod default/newer left out: unitlet.podsync.v1.Pod.status: unknown schema "core/v2.PodStatus" in status_schema`
	if !strings.Contains(warn.String(), want) {
		t.Errorf("warning %q, want %q", warn.String(), want)
	}
}
