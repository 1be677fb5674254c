package nodeagent

import (
	"testing"

	"github.com/migflex/migflex/internal/testsupport/flagdoc"
)

// TestFlagsDocumented: docs/INSTALL.md's table of the node agent's flags lists
// every flag the binary has, with its default, and no other.
func TestFlagsDocumented(t *testing.T) {
	doc, err := flagdoc.ReadDoc("../../docs/INSTALL.md")
	if err != nil {
		t.Fatal(err)
	}
	documented, err := flagdoc.Parse(doc, flagdoc.Agent)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range flagdoc.Compare(documented, flags(&Config{}).FlagSet) {
		t.Error(d)
	}
}
