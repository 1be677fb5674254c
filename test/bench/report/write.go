package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write puts a benchmark's results into dir as name.json (r, indented) and
// name.md (what markdown writes), creating dir if needed.
func Write(dir, name string, r any, markdown func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s.json: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".md"))
	if err != nil {
		return err
	}
	if err := markdown(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s.md: %w", name, err)
	}
	return f.Close()
}
