package testutil

import "github.com/prometheus/client_golang/prometheus"

// MetricSum reads a metric from g: the sum over the series of the family
// name whose label has the value (every series when label is empty),
// counting a counter's or gauge's value and a histogram's sample count.
func MetricSum(g prometheus.Gatherer, name, label, value string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum, nil
}
