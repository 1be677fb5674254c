package planner

import (
	"testing"

	"github.com/migflex/migflex/internal/testsupport/flagdoc"
)

// TestFlagsDocumented: docs/INSTALL.md's table of the planner's flags lists
// every flag the binary has, with its default, and no other.
func TestFlagsDocumented(t *testing.T) {
	problems, err := flagdoc.Check("../../docs/INSTALL.md", flagdoc.Planner, flags(&Config{}).FlagSet)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
