// Package promtext reads Prometheus text expositions as a scraper would, for tests of the
// endpoints that serve them: a parse error or a series given twice fails the read.
package promtext

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads a text exposition into its metric families by name. It refuses what the text
// parser refuses and, beyond it, a series (a name and label set) given twice, which a
// Prometheus rejects as a duplicate sample.
func Parse(body string) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse the exposition: %w", err)
	}
	for name, f := range families {
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			key := seriesKey(m)
			if seen[key] {
				return nil, fmt.Errorf("series %s{%s} given twice", name, key)
			}
			seen[key] = true
		}
	}
	return families, nil
}

// Sample is the series of families[name] with exactly labels; nil if there is none.
func Sample(families map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range families[name].GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		match := true
		for _, l := range m.GetLabel() {
			if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// Find is the first series of families[name] carrying labels, other labels besides; a
// label the series does not have counts as "", as in Prometheus. nil if there is none.
func Find(families map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, m := range families[name].GetMetric() {
		match := true
		for k, v := range labels {
			if Label(m, k) != v {
				match = false
			}
		}
		if match {
			return m
		}
	}
	return nil
}

// Label is the series' value of label name, "" when it has none.
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Rate is how fast a counter rose from before to after, per second of their samples'
// timestamps; an error when either is missing or they are not stamped one after the other.
func Rate(before, after *dto.Metric) (float64, error) {
	if before == nil || after == nil || after.GetTimestampMs() <= before.GetTimestampMs() {
		return 0, fmt.Errorf("samples %v then %v: want two, stamped one after the other", before, after)
	}
	return (Value(after) - Value(before)) / (float64(after.GetTimestampMs()-before.GetTimestampMs()) / 1000), nil
}

// Value is a counter's, gauge's or untyped sample's value.
func Value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

func seriesKey(m *dto.Metric) string {
	pairs := make([]string, 0, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// Lint runs Prometheus's metric linter (what `promtool check metrics` runs) over families
// and returns its findings as "name: problem", leaving out those on names kept as the
// kubelet or cAdvisor spell them (kept reports which).
func Lint(families map[string]*dto.MetricFamily, kept func(name string) bool) ([]string, error) {
	list := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		list = append(list, f)
	}
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range problems {
		if kept == nil || !kept(p.Metric) {
			out = append(out, p.Metric+": "+p.Text)
		}
	}
	return out, nil
}
