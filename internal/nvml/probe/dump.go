package probe

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/migflex/migflex/internal/nvml/nvmlbackend/sim"
)

// Marshal writes the result as a simulator config (sim.ParseConfig reads
// it): a comment header with the driver and the notes, the GPUs with their
// state, and the models inline.
func (r *Result) Marshal() ([]byte, error) {
	body, err := sim.MarshalConfig(r.Config)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# device-plugin probe: %d GPU(s), read-only.\n", len(r.Config.GPUs))
	if r.Driver != "" {
		fmt.Fprintf(&b, "# NVIDIA driver %s (other drivers may report other memory sizes).\n", r.Driver)
	}
	b.WriteString("# Run it as a simulated node: --nvml-backend=simulated --sim-config THIS_FILE\n")
	b.WriteString("# (the GPUs start in the state below when there is no state file yet).\n")
	b.WriteString("# Compute-instance profiles are read only where a GPU instance exists.\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "# note: %s\n", strings.ReplaceAll(n, "\n", " "))
	}
	b.Write(body)
	return b.Bytes(), nil
}
