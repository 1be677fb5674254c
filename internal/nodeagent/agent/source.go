package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/migflex/migflex/internal/domain/migconfig"
	"github.com/migflex/migflex/internal/domain/nodeinfo"
)

// The sources of the desired layout and their precedence are the Node
// contract's (nodeinfo.Sources); what the agent makes of them is here.

// ignoredSources returns the sources after the first of all (see
// nodeinfo.Sources) that ask for something else than it: an annotation
// with another document, or the label, which names a configuration of the
// config file rather than holding a document. An annotation with the same
// document as the winner (tools that write both keys) is not worth a word.
func ignoredSources(all []nodeinfo.Source) []nodeinfo.Source {
	if len(all) < 2 {
		return nil
	}
	var out []nodeinfo.Source
	for _, s := range all[1:] {
		if s.Kind != nodeinfo.SourceLabel && all[0].Kind != nodeinfo.SourceLabel && strings.TrimSpace(s.Document) == strings.TrimSpace(all[0].Document) {
			continue
		}
		out = append(out, s)
	}
	return out
}

// sourceIdentity is equal for two sources exactly when they ask for the
// same thing: same kind, configuration name and document (for a label, the
// config file's content, passed as document).
func sourceIdentity(s nodeinfo.Source, document string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00%s\x00", s.Kind, s.ConfigName)
	h.Write([]byte(document))
	return hex.EncodeToString(h.Sum(nil))
}

// scopeOf is how the source's document is read: the label's config file is
// shared by a fleet and read as mig-parted reads it (what does not fit this
// node is left out); an annotation is written for this node, so what does
// not fit it is an error (migconfig.Scope).
func scopeOf(s nodeinfo.Source) migconfig.Scope {
	if s.Kind == nodeinfo.SourceLabel {
		return migconfig.ScopeFleet
	}
	return migconfig.ScopeNode
}
