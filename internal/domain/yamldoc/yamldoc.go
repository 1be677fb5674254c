// Package yamldoc reads a YAML (or JSON) document into plain JSON values,
// as Kubernetes, mig-parted and NVIDIA's device plugin read their files
// (sigs.k8s.io/yaml), so that a parser can walk the document and name the
// path and value of every problem it finds.
package yamldoc

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// Decode returns data as JSON values: maps, slices, strings, bools, nil
// and json.Number, so that a large integer stays exact (no float64 on the
// way) and the parser decides what a number may be. A key given twice
// keeps its last value, as in sigs.k8s.io/yaml.
func Decode(data []byte) (doc any, err error) {
	defer func() {
		// A decoder's panic is the document's error, not the caller's.
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("invalid YAML: the decoder failed: %v", r)
		}
	}()
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	return doc, nil
}
