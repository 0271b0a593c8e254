package eviction

import (
	"context"
	"slices"
	"sort"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"

	evictionv1 "github.com/unitlet/unitlet/proto/unitlet/eviction/v1"
	"github.com/unitlet/unitlet/services/eviction/policy"
	"github.com/unitlet/unitlet/shared/nodeinfo"
	"github.com/unitlet/unitlet/shared/payload"
	"github.com/unitlet/unitlet/shared/watch"
)

// Server is the bus API of unitlet-eviction.
type Server struct {
	evictionv1.UnimplementedEvictionServiceServer
	m *Manager
}

// NewServer serves m over the bus.
func NewServer(m *Manager) *Server { return &Server{m: m} }

// GetState returns the last observation, the conditions and the last evictions.
func (s *Server) GetState(context.Context, *evictionv1.GetStateRequest) (*evictionv1.GetStateResponse, error) {
	return &evictionv1.GetStateResponse{State: stateToProto(s.m.State())}, nil
}

// WatchConditions streams the pressure conditions.
func (s *Server) WatchConditions(req *evictionv1.WatchConditionsRequest, stream evictionv1.EvictionService_WatchConditionsServer) error {
	return watch.Serve(stream.Context(), s.m.Subscribe(req.GetAfterSequence()), func(ev watch.Event[[]Condition]) error {
		return stream.Send(&evictionv1.WatchConditionsResponse{Sequence: ev.Seq, Conditions: conditionsToProto(ev.Value)})
	})
}

// AdmitPod is the admission verdict for a new pod.
func (s *Server) AdmitPod(_ context.Context, req *evictionv1.AdmitPodRequest) (*evictionv1.AdmitPodResponse, error) {
	pod := &corev1.Pod{}
	if err := payload.EvictionPod.DecodeJSON(req.GetPodSchema(), req.GetPod(), pod); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ok, reason, msg := s.m.Admit(pod)
	return &evictionv1.AdmitPodResponse{Admit: ok, Reason: reason, Message: msg}, nil
}

func conditionsToProto(cs []Condition) []*evictionv1.Condition {
	out := make([]*evictionv1.Condition, 0, len(cs))
	for _, c := range cs {
		pc := &evictionv1.Condition{Type: string(c.Type), Status: string(corev1.ConditionFalse), LastTransitionTime: timestamppb.New(c.LastTransitionTime)}
		for _, k := range nodeinfo.Pressures {
			switch {
			case k.Type != c.Type:
			case c.True:
				pc.Status, pc.Reason, pc.Message = string(corev1.ConditionTrue), k.UnderReason, k.UnderMessage
			default:
				pc.Reason, pc.Message = k.OKReason, k.OKMessage
			}
		}
		out = append(out, pc)
	}
	return out
}

func stateToProto(s Snapshot) *evictionv1.State {
	out := &evictionv1.State{Conditions: conditionsToProto(s.Conditions), Error: s.Error}
	if !s.Observed.IsZero() {
		out.Observed = timestamppb.New(s.Observed)
	}
	obs := observations(s.Node)
	crossed, met := map[string]bool{}, map[string]bool{}
	for _, t := range s.Result.Crossed {
		crossed[policy.ThresholdKey(t)] = true
	}
	for _, t := range s.Result.Met {
		met[policy.ThresholdKey(t)] = true
	}
	names := make([]string, 0, len(s.Node.Signals))
	for name := range s.Node.Signals {
		names = append(names, name)
	}
	for _, t := range s.Config.Thresholds {
		if _, ok := s.Node.Signals[string(t.Signal)]; !ok && !slices.Contains(names, string(t.Signal)) {
			names = append(names, string(t.Signal))
		}
	}
	sort.Strings(names)
	for _, name := range names {
		v := s.Node.Signals[name]
		sig := &evictionv1.Signal{Name: name}
		o, observed := obs[policy.Signal(name)]
		switch {
		case observed:
			sig.Observed, sig.Available, sig.Capacity = true, o.Available.String(), o.Capacity.String()
		case v.Err != nil:
			sig.Error = v.Err.Error()
		default:
			sig.Error = "not measured"
		}
		for _, t := range s.Config.Thresholds {
			if string(t.Signal) != name {
				continue
			}
			key := policy.ThresholdKey(t)
			pt := &evictionv1.Threshold{Kind: kind(t), Value: t.Raw, Crossed: crossed[key], Met: met[key]}
			if observed {
				r := t.Resolve(o.Capacity)
				pt.Resolved = r.String()
			}
			if t.Soft {
				pt.GracePeriod = t.GracePeriod.String()
				if at, ok := s.FirstSeen[key]; ok && pt.Crossed {
					pt.FirstCrossed = timestamppb.New(at)
				}
			}
			if t.MinReclaim != nil {
				pt.MinimumReclaim = valueString(*t.MinReclaim)
			}
			sig.Thresholds = append(sig.Thresholds, pt)
		}
		out.Signals = append(out.Signals, sig)
	}
	for _, e := range s.Evictions {
		out.Evictions = append(out.Evictions, &evictionv1.Eviction{
			Time: timestamppb.New(e.Time), PodUid: string(e.UID), Namespace: e.Namespace, Name: e.Name,
			Signal: e.Signal, Message: e.Message, GracePeriodSeconds: e.Grace, Error: e.Error,
		})
	}
	return out
}

func valueString(v policy.Value) string {
	if v.Quantity != nil {
		return v.Quantity.String()
	}
	return strconv.FormatFloat(float64(v.Percentage)*100, 'f', -1, 32) + "%"
}
